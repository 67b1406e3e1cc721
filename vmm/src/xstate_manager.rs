//! The per-vCPU xstate manager: what happens to the guest's extended state
//! between `KVM_RUN` calls.
//!
//! KVM keeps the guest's xsave state in the kernel; a VMM only pays for it
//! when it reads (`KVM_GET_XSAVE[2]`) or writes (`KVM_SET_XSAVE[2]`) it, and
//! each of those is a vCPU ioctl (about 6 µs on kvm_pvm, and on any KVM a
//! copy of every byte of every enabled component). The manager holds the
//! state as a **compacted buffer with only the components in use** (minimal
//! XSTATE_BV, the way XINUSE and XSAVEC with an XINUSE mask would store it),
//! fetched only when needed and written back only when modified.
//!
//! Policies ([`SyncPolicy`]):
//! - `lazy` (default): the exit path never touches xsave. The state is
//!   fetched on demand (an exit handler, a debug dump, a snapshot), cached
//!   until the next `KVM_RUN`, and written back before it only if edited.
//! - `eager`: `KVM_GET_XSAVE` + `KVM_SET_XSAVE` of the full standard image
//!   around every exit, as a naive VMM would.
//! - `eager-compact`: fetch and store compacted on every exit; write back
//!   only if modified.
//!
//! Every image goes through [`xstate::validate()`] against the guest's XCR0
//! before KVM sees it: XSTATE_BV or XCOMP_BV bits outside XCR0, a bad
//! header or reserved MXCSR bits are refused with a clear error.
//!
//! A guest's own request ([`XstateManager::guest_edit_xmm`], the
//! `XSTATE_EDIT_PORT` protocol) that the state cannot take is the guest's
//! failure, not the VMM's: it is refused before anything is cached, and the
//! refusal is returned as a value ([`EditOutcome::Refused`]) for the run
//! loop to answer to the guest and report, instead of ending the VMM.

pub(crate) mod io;

use kvm_ioctls::VcpuFd;
use xstate::{Xfeature, XfeatureMask, XsaveBuf, XsaveInfo};

use crate::error::{Error, Result, XstateError};
use io as vcpu;

/// When the manager moves the guest's xsave state.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SyncPolicy {
    /// Only on demand; written back only if modified.
    #[default]
    Lazy,
    /// Full standard image read and written around every exit.
    Eager,
    /// Read and stored compacted on every exit; written back only if modified.
    EagerCompact,
}

impl SyncPolicy {
    /// The policy as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lazy => "lazy",
            Self::Eager => "eager",
            Self::EagerCompact => "eager-compact",
        }
    }
}

/// What the manager did, for reports and benchmarks.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, schemars::JsonSchema)]
pub struct SyncStats {
    /// `KVM_GET_XSAVE[2]` calls.
    pub fetches: u64,
    /// `KVM_SET_XSAVE[2]` calls.
    pub writebacks: u64,
    /// Bytes of the standard images KVM handed over.
    pub standard_bytes: u64,
    /// Bytes the compacted, in-use-only copies took.
    pub compacted_bytes: u64,
}

impl SyncStats {
    /// Add another vCPU's statistics.
    pub fn add(&mut self, other: &SyncStats) {
        self.fetches += other.fetches;
        self.writebacks += other.writebacks;
        self.standard_bytes += other.standard_bytes;
        self.compacted_bytes += other.compacted_bytes;
    }
}

/// The answer to a guest's edit request.
#[derive(Debug)]
pub enum EditOutcome {
    /// The edit is cached and reaches KVM before the guest runs again.
    Done,
    /// The guest's XCR0 (or the policy) cannot hold the edit; nothing changed.
    Refused(XstateError),
}

/// The guest's extended state between `KVM_RUN` calls.
pub struct XstateManager {
    policy: SyncPolicy,
    /// KVM's leaf 0xD: the layouts of the images KVM exchanges.
    info: XsaveInfo,
    /// The user state the guest may enable (its CPUID policy).
    guest_xcr0: XfeatureMask,
    xsave2_size: usize,
    /// The state as last fetched: compacted, in-use components only.
    cached: Option<XsaveBuf>,
    /// `cached` was edited and must reach KVM before the guest runs.
    dirty: bool,
    stats: SyncStats,
}

impl XstateManager {
    /// A manager with nothing cached: the first access fetches from KVM.
    /// `xsave2_size` is [`HostKvm::xsave2_size`](crate::kvm::HostKvm::xsave2_size).
    pub fn new(
        policy: SyncPolicy,
        info: XsaveInfo,
        guest_xcr0: XfeatureMask,
        xsave2_size: usize,
    ) -> Self {
        Self {
            policy,
            info,
            guest_xcr0,
            xsave2_size,
            cached: None,
            dirty: false,
            stats: SyncStats::default(),
        }
    }

    /// When this manager moves the state.
    pub fn policy(&self) -> SyncPolicy {
        self.policy
    }

    /// What it did so far.
    pub fn stats(&self) -> SyncStats {
        self.stats
    }

    /// The user state the guest may enable: its xstate policy.
    pub fn policy_xcr0(&self) -> XfeatureMask {
        self.guest_xcr0
    }

    /// Called after every exit to user space.
    pub fn on_exit(&mut self, vcpu: &VcpuFd) -> Result<()> {
        match self.policy {
            SyncPolicy::Lazy => Ok(()),
            SyncPolicy::Eager => {
                // The naive VMM: read everything, write everything back.
                let image = vcpu::get_xsave(vcpu, self.xsave2_size)?;
                self.stats.fetches += 1;
                self.stats.standard_bytes += image.len() as u64;
                vcpu::set_xsave(vcpu, &image, self.xsave2_size)?;
                self.stats.writebacks += 1;
                Ok(())
            }
            SyncPolicy::EagerCompact => self.fetch(vcpu).map(|_| ()),
        }
    }

    /// Called before every `KVM_RUN`: write back an edited state; the cache
    /// goes stale once the guest runs.
    pub fn before_run(&mut self, vcpu: &VcpuFd) -> Result<()> {
        if self.dirty {
            if let Some(c) = self.cached.take() {
                self.write_back(vcpu, &c)?;
            }
            self.dirty = false;
        }
        self.cached = None;
        Ok(())
    }

    /// The guest's state, compacted with only the components in use;
    /// fetched from KVM at most once between two `KVM_RUN`s.
    pub fn state(&mut self, vcpu: &VcpuFd) -> Result<&XsaveBuf> {
        self.fetch(vcpu)
    }

    /// The guest's state as a standard-format image of everything KVM's
    /// image can hold.
    pub fn standard_image(&mut self, vcpu: &VcpuFd) -> Result<XsaveBuf> {
        let (info, xcr0) = (self.info, self.info.supported_xcr0());
        let c = self.fetch(vcpu)?;
        Ok(
            xstate::expand_to_standard(&info, c, xcr0).map_err(|source| XstateError::Expand {
                what: "the guest's state",
                source,
            })?,
        )
    }

    /// Set XMM`reg` (a debug-style write); reaches KVM before the next `KVM_RUN`.
    pub fn set_xmm(&mut self, vcpu: &VcpuFd, reg: usize, value: [u8; 16]) -> Result<()> {
        if reg >= 16 {
            return Err(XstateError::NoSuchXmm(reg).into());
        }
        if !self.guest_xcr0.contains(Xfeature::Sse) {
            return Err(XstateError::NoSse {
                reg,
                xcr0: self.guest_xcr0,
            }
            .into());
        }
        let mut image = self.standard_image(vcpu)?;
        image.set_xmm(reg, value);
        // SSE state is now explicitly live: XRSTOR would otherwise load the
        // init value and drop the edit.
        let bv = image.xstate_bv() | Xfeature::Sse.bit();
        image.set_xstate_bv(bv);
        self.replace_standard(&image)
    }

    /// A guest's request to set XMM`reg` (`XSTATE_EDIT_PORT`), checked
    /// against both the policy and the XCR0 in force (`KVM_GET_XCRS`, one
    /// ioctl on this rare path): a guest whose XCR0 lacks SSE gets
    /// [`EditOutcome::Refused`] and nothing is cached. Errors are the VMM's
    /// own (an ioctl failed, KVM's image is unreadable).
    pub fn guest_edit_xmm(
        &mut self,
        vcpu: &VcpuFd,
        reg: usize,
        value: [u8; 16],
    ) -> Result<EditOutcome> {
        let in_force = XfeatureMask::from_bits(vcpu::get_xcr0(vcpu)?);
        for xcr0 in [self.guest_xcr0, in_force] {
            if !xcr0.contains(Xfeature::Sse) {
                return Ok(EditOutcome::Refused(XstateError::NoSse { reg, xcr0 }));
            }
        }
        if reg >= 16 {
            return Ok(EditOutcome::Refused(XstateError::NoSuchXmm(reg)));
        }
        let mut image = self.standard_image(vcpu)?;
        image.set_xmm(reg, value);
        image.set_xstate_bv(image.xstate_bv() | Xfeature::Sse.bit());
        // What the write-back will check: refuse now, while nothing is cached.
        if let Err(e) = self.validate_for(image.as_bytes(), in_force & self.guest_xcr0) {
            return match e {
                Error::Xstate(e @ (XstateError::Refused { .. } | XstateError::Compacted)) => {
                    Ok(EditOutcome::Refused(e))
                }
                other => Err(other),
            };
        }
        self.replace_standard(&image)?;
        Ok(EditOutcome::Done)
    }

    /// Replace the whole state with a standard-format image (a restore or a
    /// debugger write), validated against the guest's XCR0 first.
    pub fn replace_standard(&mut self, image: &XsaveBuf) -> Result<()> {
        self.validate(image.as_bytes())?;
        let compacted = xstate::compacted_in_use(&self.info, image, self.guest_xcr0)
            .map_err(XstateError::Compact)?;
        self.cached = Some(compacted);
        self.dirty = true;
        Ok(())
    }

    fn fetch(&mut self, vcpu: &VcpuFd) -> Result<&XsaveBuf> {
        if self.cached.is_none() {
            let image = vcpu::get_xsave(vcpu, self.xsave2_size)?;
            self.stats.fetches += 1;
            self.stats.standard_bytes += image.len() as u64;
            // Compact against what KVM's image can hold: a fetch must never
            // lose state. The guest's XCR0 is enforced when state goes back.
            let compacted =
                xstate::compacted_in_use(&self.info, &image, self.info.supported_xcr0())
                    .map_err(XstateError::MalformedFromKvm)?;
            self.stats.compacted_bytes += compacted.len() as u64;
            self.cached = Some(compacted);
        }
        Ok(self.cached.as_ref().expect("filled above"))
    }

    fn write_back(&mut self, vcpu: &VcpuFd, compacted: &XsaveBuf) -> Result<()> {
        let standard =
            xstate::expand_to_standard(&self.info, compacted, self.info.supported_xcr0()).map_err(
                |source| XstateError::Expand {
                    what: "the edited state",
                    source,
                },
            )?;
        // Against the XCR0 in force, not just the policy: the guest may have
        // enabled less. One more ioctl, on this rare path only.
        let xcr0 = XfeatureMask::from_bits(vcpu::get_xcr0(vcpu)?);
        self.validate_for(standard.as_bytes(), xcr0)?;
        vcpu::set_xsave(vcpu, &standard, self.xsave2_size)?;
        self.stats.writebacks += 1;
        Ok(())
    }

    /// Refuse an image KVM must not see: bits outside the guest's XCR0, a
    /// compacted image where KVM wants the standard format, bad reserved bits.
    fn validate(&self, image: &[u8]) -> Result<()> {
        self.validate_for(image, self.guest_xcr0)
    }

    fn validate_for(&self, image: &[u8], xcr0: XfeatureMask) -> Result<()> {
        let format = xstate::validate(image, &self.info, xcr0, XfeatureMask::EMPTY)
            .map_err(|source| XstateError::Refused { xcr0, source })?;
        if format != xstate::Format::Standard {
            return Err(XstateError::Compacted.into());
        }
        Ok(())
    }
}
