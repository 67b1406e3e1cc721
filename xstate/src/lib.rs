//! The XSAVE model: everything a VMM and a guest kernel need to know about
//! x86 extended CPU state (x87, SSE, AVX, AVX-512, PKRU, AMX, CET, ...),
//! exact for every x86 CPU, not just the one it runs on.
//!
//! A VMM moves XSAVE images between KVM (`KVM_GET_XSAVE`/`KVM_SET_XSAVE`,
//! always the standard format), snapshots, other hosts and guests that save
//! with XSAVEC (the compacted format). Where each component sits depends on
//! the CPU (CPUID leaf 0xD: AVX-512 and PKRU are at different standard
//! offsets on Intel and AMD) and, in the compacted format, on XCOMP_BV. This
//! crate computes those layouts from leaf 0xD, checks XCR0 values and
//! images by the rules XSETBV and XRSTOR apply, and converts between the
//! formats byte for byte, so that bad state is refused with an error naming
//! the rule instead of a #GP in the guest or an `EINVAL` from KVM.
//!
//! # Example
//! A standard-format image of an AMD EPYC 7763 (Zen 3 "Milan", XCR0 0x207:
//! x87, SSE, AVX, PKRU) compacted as XSAVEC would save it, and back:
//!
//! ```
//! use xstate::{compact, expand, init_image, CpuidRegs, Format, InitMode};
//! use xstate::{Xfeature, XfeatureMask, XsaveInfo};
//!
//! // CPUID leaf 0xD of the EPYC 7763 (tests/data/amd-zen3-milan.json);
//! // a VMM reads it from KVM_GET_SUPPORTED_CPUID or the host's CPUID.
//! let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
//!     0 => CpuidRegs::new(0x207, 832, 2440, 0),
//!     1 => CpuidRegs::new(0xf, 848, 0x1800, 0),
//!     2 => CpuidRegs::new(256, 576, 0, 0),  // AVX: 256 bytes at 576
//!     9 => CpuidRegs::new(8, 2432, 0, 0),   // PKRU: 8 bytes at 2432
//!     11 => CpuidRegs::new(16, 0, 1, 0),    // CET_U (supervisor)
//!     12 => CpuidRegs::new(24, 0, 1, 0),    // CET_S (supervisor)
//!     _ => CpuidRegs::default(),
//! })
//! .expect("a consistent leaf 0xD");
//!
//! // What the user asked for on the command line, checked as an XCR0.
//! let xcr0 = XfeatureMask::resolve("avx,pkru", info.supported_xcr0())
//!     .expect("a well-formed --xfeatures value")
//!     .result;
//! assert_eq!(xcr0.bits(), 0x207);
//! xcr0.validate_xcr0(info.supported_xcr0())?;
//!
//! // PKRU: at its CPUID offset in the standard format, right after AVX
//! // in the compacted one.
//! let standard = info.layout(xcr0, Format::Standard)?;
//! let compacted = info.layout(xcr0, Format::Compacted)?;
//! assert_eq!(standard.offset(Xfeature::Pkru), Some(2432));
//! assert_eq!(compacted.offset(Xfeature::Pkru), Some(832));
//! assert_eq!((standard.total_size(), compacted.total_size()), (2440, 840));
//!
//! // The architectural initial image, compacted and expanded again.
//! let mut image = vec![0u8; 2440];
//! init_image(&info, xcr0, InitMode::Minimal, &mut image)?;
//! let mut packed = vec![0u8; 840];
//! assert_eq!(compact(&info, &image, xcr0, &mut packed)?, 840);
//! let mut back = vec![0u8; 2440];
//! expand(&info, &packed, &mut back, xcr0)?;
//! assert_eq!(back, image);
//! # Ok::<(), xstate::ConvertError>(())
//! ```
//!
//! # Features
//! - `std` (default): owned 64-byte aligned buffers ([`XsaveBuf`]), the
//!   conversions that allocate ([`compact_to_buf`], [`expand_to_standard`],
//!   [`compacted_in_use`]), [`lint::lint_all`] and `std::error::Error` for
//!   the error types. Without it the crate is `no_std` and allocates
//!   nothing: the guest kernel uses it that way.
//! - `native` (x86_64 only, implies `std`): CPUID, XGETBV, XSAVE,
//!   XSAVEOPT, XSAVEC and XRSTOR on the running CPU, with checks that keep
//!   XRSTOR from faulting or changing the caller's floating-point
//!   environment, and a save-strategy chooser timed with RDTSC (`native`
//!   module, `XsaveInfo::host`).
//! - `kvm` (implies `std`): leaf 0xD from a `kvm_bindings::CpuId` table and
//!   [`XsaveBuf`] to and from `kvm_xsave` / the KVM_GET_XSAVE2 wrapper
//!   (`kvm` module).
//! - `serde` (implies `std`): `CpuidProfile`, recorded CPUID leaf 0xD as
//!   JSON, for testing on CPUs the machine is not (`profile` module).
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
//! - [`flags`]: the CPUID feature flags extended state gates, named once
//!   (leaf, subleaf, [`info::Reg`], bit, SDM and `/proc/cpuinfo` names, the
//!   components each needs: [`flags::GATED_FLAGS`]).
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
pub mod flags;
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

/// The example of `README.md`, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
