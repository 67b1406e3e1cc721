//! Huge pages: which of the RAM range are THP, the hugetlb pool from
//! meminfo, and hugetlbfs sizes refused before mapping.

use super::*;

#[test]
fn anon_huge_pages_of_the_ram_range_only() {
    let smaps = "7f0000000000-7f0004000000 rw-p 00000000 00:00 0 \n\
                     Size:              65536 kB\n\
                     AnonHugePages:     61440 kB\n\
                     7f0004000000-7f0004200000 rw-p 00000000 00:00 0 \n\
                     AnonHugePages:      2048 kB\n";
    assert_eq!(
        parse_anon_huge_kib(smaps, 0x7f00_0000_0000, 0x7f00_0400_0000),
        61440
    );
    assert_eq!(
        parse_anon_huge_kib(smaps, 0x7f00_0000_0000, 0x7f00_0420_0000),
        63488
    );
    assert_eq!(parse_anon_huge_kib(smaps, 0x1000, 0x2000), 0);
}

#[test]
fn hugetlb_pool_from_meminfo_and_the_named_shortage() {
    let meminfo = "MemTotal:       24683520 kB\n\
                       HugePages_Total:      40\n\
                       HugePages_Free:       10\n\
                       HugePages_Rsvd:        0\n\
                       Hugepagesize:       2048 kB\n";
    let p = HugetlbPool::parse(meminfo).unwrap();
    assert_eq!(
        p,
        HugetlbPool {
            total: 40,
            free: 10,
            page_kib: 2048
        }
    );
    assert!(p.check(20).is_ok());
    let e = p.check(64).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--hugepages hugetlbfs: 64 MiB of guest RAM needs 32 free 2 MiB huge pages, the host \
             has 10 free (HugePages_Free in /proc/meminfo, of 40); reserve them as root with \
             `echo 62 > /proc/sys/vm/nr_hugepages`"
    );
    // A 1 GiB default pool says nothing about the 2 MiB one.
    let g = HugetlbPool {
        page_kib: 1 << 20,
        ..p
    };
    assert!(g.check(64).is_ok());
    assert_eq!(HugetlbPool::parse("MemTotal: 1 kB\n"), None);
}

#[test]
fn hugetlbfs_refuses_odd_sizes_before_mapping() {
    let e = allocate_ram_backed(65, Some(RamBacking::Hugetlbfs)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "guest memory: --hugepages hugetlbfs needs --mem in whole 2 MiB huge pages: 65 MiB is odd"
    );
}
