//! Writing a container: the file bytes of a [`Container`], and the
//! checksums of a file edited in memory recomputed.

use super::{
    align_up, le_u32, Container, ENTRY_SIZE, FORMAT_VERSION, HEADER_SIZE, MAGIC,
    MEMORY_SECTION_ALIGN, PAGES_SECTION, SECTION_ALIGN,
};

impl Container {
    /// The file bytes: header, section table, sections, checksums filled in.
    pub fn to_bytes(&self) -> Vec<u8> {
        let table_off = HEADER_SIZE;
        let mut pos = table_off + ENTRY_SIZE * self.sections.len();
        let mut placed = Vec::with_capacity(self.sections.len());
        for s in &self.sections {
            let align = if s.name == PAGES_SECTION {
                MEMORY_SECTION_ALIGN
            } else {
                SECTION_ALIGN
            };
            pos = align_up(pos, align);
            placed.push(pos);
            pos += s.data.len();
        }
        let total = pos;
        let mut out = vec![0u8; total];
        for (s, &off) in self.sections.iter().zip(&placed) {
            out[off..off + s.data.len()].copy_from_slice(&s.data);
        }
        for (i, (s, &off)) in self.sections.iter().zip(&placed).enumerate() {
            let e = &mut out[table_off + i * ENTRY_SIZE..table_off + (i + 1) * ENTRY_SIZE];
            e[..s.name.len()].copy_from_slice(s.name.as_bytes());
            e[40..48].copy_from_slice(&(off as u64).to_le_bytes());
            e[48..56].copy_from_slice(&(s.data.len() as u64).to_le_bytes());
            e[56..60].copy_from_slice(&crc32fast::hash(&s.data).to_le_bytes());
        }
        let table_crc =
            crc32fast::hash(&out[table_off..table_off + ENTRY_SIZE * self.sections.len()]);
        let h = &mut out[..HEADER_SIZE];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(self.sections.len() as u32).to_le_bytes());
        h[20..24].copy_from_slice(&(ENTRY_SIZE as u32).to_le_bytes());
        h[24..32].copy_from_slice(&(table_off as u64).to_le_bytes());
        h[32..40].copy_from_slice(&(total as u64).to_le_bytes());
        h[40..44].copy_from_slice(&table_crc.to_le_bytes());
        let header_crc = crc32fast::hash(&h[..44]);
        h[44..48].copy_from_slice(&header_crc.to_le_bytes());
        out
    }
}

/// Recompute the section table's and the header's CRC32 of a file in
/// memory after its header or table was edited (tests and fuzzers craft
/// files so; sections' own CRCs are left as they are). Does nothing to a
/// buffer shorter than its header and table.
pub fn reseal(bytes: &mut [u8]) {
    if bytes.len() < HEADER_SIZE {
        return;
    }
    let count = le_u32(bytes, 16) as usize;
    let end = HEADER_SIZE.saturating_add(count.saturating_mul(ENTRY_SIZE));
    if let Some(table) = bytes.get(HEADER_SIZE..end) {
        let crc = crc32fast::hash(table);
        bytes[40..44].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32fast::hash(&bytes[..44]);
    bytes[44..48].copy_from_slice(&crc.to_le_bytes());
}
