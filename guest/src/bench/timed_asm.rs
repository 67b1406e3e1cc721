//! Assembly text the timed benchmarks share, as `asm!` template pieces:
//! the fenced TSC read all three use, and the exit loops (`count` PIO
//! writes, MMIO stores or CPUIDs in a row) of [`super::exits`] (what an
//! exit costs) and [`super::xcheck`] (whether the registers survive it).
//! One copy each, so the benchmarks time and provoke exactly the same way.

/// RDTSC between two LFENCEs (nothing earlier is still executing, nothing
/// later has started), the 64-bit count assembled in RAX. Clobbers RDX.
macro_rules! rdtsc_fenced_asm {
    () => {
        concat!(
            "lfence\n",
            "rdtsc\n",
            "lfence\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
        )
    };
}

pub(crate) use rdtsc_fenced_asm;

/// The three exit loops, as one `asm!` template piece (Intel syntax).
///
/// Register contract of the including block:
/// - on entry R8 = the exit count (at least 1), and control either falls
///   into the text (PIO loop) or has jumped to local label `21` (MMIO) or
///   `22` (CPUID);
/// - the block must give the named operands `pio` (the port, a `const`)
///   and `mmio` (the guest-physical address, a `const`);
/// - clobbered: RAX, RCX, RDX, RDI, R8, R9 (RBX, which CPUID writes, is
///   kept in R9 and restored);
/// - local labels 20, 21, 211, 22 and 221 are taken; the PIO and MMIO
///   loops leave by `jmp 29f`, the CPUID loop falls out of the end of the
///   text, so the block defines label `29` after it or right where the
///   text ends.
macro_rules! exit_loops_asm {
    () => {
        concat!(
            "mov edx, {pio}\n",
            "xor eax, eax\n",
            "20:\n",
            "out dx, eax\n",
            "dec r8\n",
            "jnz 20b\n",
            "jmp 29f\n",
            "21:\n",
            "mov rdi, {mmio}\n",
            "xor eax, eax\n",
            "211:\n",
            "mov dword ptr [rdi], eax\n",
            "dec r8\n",
            "jnz 211b\n",
            "jmp 29f\n",
            "22:\n",
            "mov r9, rbx\n",
            "221:\n",
            "xor eax, eax\n",
            "xor ecx, ecx\n",
            "cpuid\n",
            "dec r8\n",
            "jnz 221b\n",
            "mov rbx, r9\n",
        )
    };
}

pub(crate) use exit_loops_asm;
