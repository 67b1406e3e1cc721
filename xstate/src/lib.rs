//! The XSAVE model: everything the VMM and the guest kernel know about
//! extended CPU state, exact on every x86 CPU (not just the one it runs on).
//!
//! # Modules
//! From the bottom layer up; each module uses only modules above it in
//! this list.
//! - [`feature`]: the state components 0..=19 ([`Xfeature`]): names, user or
//!   supervisor.
//! - [`mask`]: [`XfeatureMask`], a set of components (XCR0, IA32_XSS,
//!   XSTATE_BV, XCOMP_BV): set algebra, the architectural groups, printing.
//! - [`rules`]: the architectural rules of XCR0
//!   ([`XfeatureMask::validate_xcr0`], one [`Xcr0Error`] variant per rule),
//!   the one table of component prerequisites ([`rules::DEPENDENCIES`]) and
//!   its closures ([`XfeatureMask::with_dependencies`]).
//! - [`parse`]: the mask grammar (`0x2e7`, `avx512`, `host,-avx`): the
//!   `--xfeatures` request ([`XfeatureMask::resolve`], [`Resolution`]) and
//!   the literal set ([`XfeatureMask::parse`]), [`MaskError`].
//! - [`info`]: [`XsaveInfo`], CPUID leaf 0xD validated: supported XCR0/IA32_XSS,
//!   per-component size, standard offset, 64-byte alignment and XFD flags,
//!   XSAVEOPT/XSAVEC/XGETBV1/XSAVES/XFD support, and the names of the CPUID
//!   bits it reads ([`info::leaf_d1_eax`], [`info::leaf_d_ecx`]). Built by a
//!   pure function over the raw subleaves, from the host (`native`), KVM's
//!   CPUID table (`kvm`) or a recorded dump (`profile`, `serde`).
//! - [`layout`]: standard and compacted [`Layout`]s of any mask.
//! - [`lint`]: consistency of a CPUID table's extended-state enumeration
//!   across leaves 1, 7, 0xD, 0x14, 0x19, 0x1D/0x1E and the XCR0 in force
//!   ([`lint::RULES`], one function per rule).
//! - [`restrict`]: leaf 0xD as a guest sees it when offered fewer components
//!   ([`XsaveInfo::restricted`]).
//! - [`strategy`]: [`SaveStrategy`], the four user-mode save instructions and
//!   their one set of names.
//! - [`compat`]: whether saved state can be restored on a host
//!   ([`restorable_on`]), the largest valid XCR0 of a mask, and masks
//!   described for messages ([`Described`]).
//! - [`dynamic`]: dynamic xfeatures (AMX tile data): which components need
//!   an OS permission (XFD-capable), the permission request, and buffer sizes
//!   with and without them ([`dynamic::DynamicSizes`]).
//! - [`area`]: the fixed part of every area: the legacy region and header
//!   byte map ([`area::offsets`]), [`XSAVE_MIN_SIZE`], the x87/SSE init values.
//! - [`buffer`]: XSAVE areas: [`XsaveRef`]/[`XsaveMut`] views over caller
//!   memory (no allocation), [`XsaveBuf`] (owned, `std`), typed access to the
//!   legacy region, header and components, [`BufferError`].
//! - [`mod@validate`]: checking an image for a vCPU before XRSTOR or
//!   KVM_SET_XSAVE sees it ([`validate()`]).
//! - [`convert`]: standard <-> compacted conversion ([`compact`], [`expand`])
//!   and the MXCSR rules of XRSTOR.
//! - [`init`]: the architectural initial image ([`init_image`], [`InitMode`])
//!   and init-state detection ([`minimal_xstate_bv`]).
//! - `profile` (feature `serde`): `CpuidProfile`, the JSON dump format of
//!   `tests/data`.
//! - `kvm` (feature `kvm`): `kvm_xsave` / KVM_GET_XSAVE2 images and KVM's
//!   supported CPUID.
//! - `native` (feature `native`, x86_64): XGETBV, XSAVE, XSAVEOPT, XSAVEC,
//!   XRSTOR on the running CPU and a measured save-strategy chooser.
//!
//! # Conventions
//! - x87 and SSE live in the 512-byte legacy region in both formats. Their
//!   [`ComponentInfo`] and layout entries are fixed: x87 at offset 0, size 160
//!   (FCW..FDP at 0..24, ST0-7 at 32..160); SSE at offset 160, size 256
//!   (XMM0-15). MXCSR (bytes 24..28) belongs to SSE although it sits inside
//!   the x87 range; MXCSR_MASK (28..32) and bytes 416..512 belong to no
//!   component and are carried verbatim. See [`convert`] for the MXCSR rules
//!   of XRSTOR.
//! - Supervisor components have no standard-format offset (reported as 0)
//!   and appear only in compacted layouts.
//! - Every size and offset is a `u32` byte count; every area starts on a
//!   64-byte boundary and is at least 576 bytes (legacy region + header).
//! - Bad input (masks, CPUID data, images) gives an error enum naming the
//!   broken rule; nothing panics on it.
//!
//! The core (everything but `profile`, `kvm` and `native`) is `no_std`
//! without allocation when the default `std` feature is off; the guest kernel
//! uses it that way.
#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_op_in_unsafe_fn)]

pub mod area;
pub mod buffer;
pub mod compat;
pub mod convert;
pub mod dynamic;
pub mod feature;
pub mod info;
pub mod init;
#[cfg(feature = "kvm")]
pub mod kvm;
pub mod layout;
pub mod lint;
pub mod mask;
#[cfg(all(feature = "native", target_arch = "x86_64"))]
pub mod native;
pub mod parse;
#[cfg(feature = "serde")]
pub mod profile;
pub mod restrict;
pub mod rules;
pub mod strategy;
pub mod validate;

pub use area::XSAVE_MIN_SIZE;
#[cfg(feature = "std")]
pub use buffer::XsaveBuf;
pub use buffer::{BufferError, XsaveMut, XsaveRef};
pub use compat::{largest_valid_xcr0, restorable_on, Described, Incompatibility};
pub use convert::{compact, expand, ConvertError};
#[cfg(feature = "std")]
pub use convert::{compact_to_buf, expand_to_standard};
pub use feature::Xfeature;
pub use info::{ComponentInfo, CpuidRegs, InfoError, XsaveInfo};
#[cfg(feature = "std")]
pub use init::compacted_in_use;
pub use init::{init_image, minimal_xstate_bv, InitMode};
pub use layout::{Format, Layout, LayoutError};
pub use mask::XfeatureMask;
#[cfg(all(feature = "native", target_arch = "x86_64"))]
pub use native::{choose_save_strategy, xgetbv, NativeError, StrategyReport};
pub use parse::{MaskError, Resolution, Token};
#[cfg(feature = "serde")]
pub use profile::{CpuidEntry, CpuidProfile, Hex32, ProfileError};
pub use rules::Xcr0Error;
pub use strategy::SaveStrategy;
pub use validate::validate;
