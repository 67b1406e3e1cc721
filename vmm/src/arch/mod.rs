//! The x86 PC platform the guest boots on: where things sit in guest
//! physical memory (`layout`), which kernel images are acceptable
//! ([`elf`]), how a PVH kernel is loaded and told about its memory
//! ([`boot`]), the Linux boot protocol of a bzImage ([`linux`]), how it
//! learns its CPUs and interrupt controllers ([`mptable`], and for a PC
//! guest the ACPI tables of [`acpi`]), the register state it
//! starts in (`regs`), with the page tables of the direct 64-bit entry
//! (`paging`), and the host permission dynamic xfeatures (AMX tile data)
//! need ([`amx`]).
//!
//! Nothing here talks to KVM (`amx` talks to the host kernel, before KVM): these are the platform's rules, applied to
//! guest memory and register structures that [`crate::vstate`] hands to KVM.

pub mod acpi;
pub mod amx;
pub mod boot;
pub mod elf;
pub(crate) mod error;
pub mod layout;
pub mod linux;
pub mod mptable;
pub(crate) mod paging;
pub(crate) mod regs;
