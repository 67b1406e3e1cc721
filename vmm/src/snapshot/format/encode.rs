//! Writing a container: the file bytes of a [`Container`], and the
//! checksums of a file edited in memory recomputed.

use super::{
    align_up, le_u32, Container, ENTRY_SIZE, HEADER_SIZE, MAGIC, MEMORY_SECTION_ALIGN,
    PAGES_SECTION, SECTION_ALIGN,
};

/// A last section whose bytes the caller writes itself, after the
/// [`Container::head_bytes`]: its length and CRC32 are all the encoding
/// needs (a snapshot's stored pages, written straight from guest memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct External<'a> {
    /// The section's name.
    pub name: &'a str,
    /// Its length in bytes.
    pub len: u64,
    /// The CRC32 of its bytes.
    pub crc: u32,
}

impl Container {
    /// The file bytes: header, section table, sections, checksums filled in.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode(None)
    }

    /// The file bytes up to where the `last` section starts (the file is
    /// these bytes, then `last`'s `len` bytes): header, table (with
    /// `last`'s entry), every section of `self` and the padding before
    /// `last`. The same file [`to_bytes`](Self::to_bytes) gives with
    /// `last` pushed at the end.
    pub fn head_bytes(&self, last: External<'_>) -> Vec<u8> {
        self.encode(Some(last))
    }

    fn encode(&self, last: Option<External<'_>>) -> Vec<u8> {
        // (name, length, CRC or None for "hash the data") of every entry.
        let mut entries: Vec<(&str, u64, Option<u32>)> = self
            .sections
            .iter()
            .map(|s| (s.name.as_str(), s.data.len() as u64, None))
            .collect();
        if let Some(e) = last {
            entries.push((e.name, e.len, Some(e.crc)));
        }
        let table_off = HEADER_SIZE;
        let mut pos = table_off + ENTRY_SIZE * entries.len();
        let mut placed = Vec::with_capacity(entries.len());
        for &(name, len, _) in &entries {
            let align = if name == PAGES_SECTION {
                MEMORY_SECTION_ALIGN
            } else {
                SECTION_ALIGN
            };
            pos = align_up(pos, align);
            placed.push(pos);
            pos += len as usize;
        }
        let total = pos;
        let head = match last {
            Some(e) => total - e.len as usize,
            None => total,
        };
        let mut out = vec![0u8; head];
        for (s, &off) in self.sections.iter().zip(&placed) {
            out[off..off + s.data.len()].copy_from_slice(&s.data);
        }
        for (i, (&(name, len, crc), &off)) in entries.iter().zip(&placed).enumerate() {
            let crc = crc.unwrap_or_else(|| crc32fast::hash(&self.sections[i].data));
            let e = &mut out[table_off + i * ENTRY_SIZE..table_off + (i + 1) * ENTRY_SIZE];
            e[..name.len()].copy_from_slice(name.as_bytes());
            e[40..48].copy_from_slice(&(off as u64).to_le_bytes());
            e[48..56].copy_from_slice(&len.to_le_bytes());
            e[56..60].copy_from_slice(&crc.to_le_bytes());
        }
        let table_crc = crc32fast::hash(&out[table_off..table_off + ENTRY_SIZE * entries.len()]);
        let h = &mut out[..HEADER_SIZE];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&self.version.to_le_bytes());
        h[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(entries.len() as u32).to_le_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The head and the last section's bytes written after it are exactly
    /// the file `to_bytes` gives with that section pushed last: same
    /// layout, same table, same CRCs.
    #[test]
    fn head_bytes_then_the_last_section_is_the_whole_file() {
        let mut c = Container::new();
        c.push("meta", b"{\"a\":1}".to_vec());
        c.push("memory", vec![7; 40]);
        let pages: Vec<u8> = (0..3 * 4096).map(|i| (i * 31 % 251) as u8).collect();
        let head = c.head_bytes(External {
            name: PAGES_SECTION,
            len: pages.len() as u64,
            crc: crc32fast::hash(&pages),
        });
        assert_eq!(head.len() % MEMORY_SECTION_ALIGN, 0, "pages start aligned");
        let mut whole = c.clone();
        whole.push(PAGES_SECTION, pages.clone());
        let mut got = head;
        got.extend_from_slice(&pages);
        assert!(got == whole.to_bytes());
    }
}
