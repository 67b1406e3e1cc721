/* The start-up floor: the least a KVM VMM does to run one guest
 * instruction in 64-bit mode. Opens /dev/kvm, creates a VM with 64 MiB of
 * RAM and one vCPU already in long mode (identity map of the first 1 GiB
 * with 2 MiB pages, flat 64-bit CS), runs `out %al, $0xf4` and exits 0 when
 * that exit arrives. `vmm bench startup` compiles and times it beside
 * `vmm run --workload none --no-native`. Build: cc -O2 -o kvm_floor kvm_floor.c */
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#define MEM (64UL << 20)
#define PML4 0x1000UL
#define PDPT 0x2000UL
#define PD 0x3000UL
#define CODE 0x100000UL

static int fail(const char *what) { perror(what); return 1; }

int main(void) {
  int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm < 0) return fail("/dev/kvm");
  int vm = ioctl(kvm, KVM_CREATE_VM, 0);
  if (vm < 0) return fail("KVM_CREATE_VM");
  uint8_t *mem = mmap(NULL, MEM, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return fail("mmap");
  struct kvm_userspace_memory_region region = {
      .slot = 0, .guest_phys_addr = 0, .memory_size = MEM, .userspace_addr = (uintptr_t)mem};
  if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0) return fail("KVM_SET_USER_MEMORY_REGION");
  uint64_t *pml4 = (void *)(mem + PML4), *pdpt = (void *)(mem + PDPT), *pd = (void *)(mem + PD);
  pml4[0] = PDPT | 3; /* present, writable */
  pdpt[0] = PD | 3;
  for (uint64_t i = 0; i < 512; i++) pd[i] = (i << 21) | 0x83; /* 2 MiB pages */
  static const uint8_t code[] = {0xe6, 0xf4, 0xf4}; /* out %al, $0xf4; hlt */
  memcpy(mem + CODE, code, sizeof code);
  int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
  if (vcpu < 0) return fail("KVM_CREATE_VCPU");
  int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
  struct kvm_run *run = mmap(NULL, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
  if (run == MAP_FAILED) return fail("mmap kvm_run");
  struct kvm_sregs sregs;
  if (ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0) return fail("KVM_GET_SREGS");
  struct kvm_segment cs = {.base = 0, .limit = 0xffffffff, .selector = 8, .type = 11,
                           .present = 1, .dpl = 0, .db = 0, .s = 1, .l = 1, .g = 1};
  struct kvm_segment ds = cs;
  ds.selector = 16; ds.type = 3; ds.l = 0; ds.db = 1;
  sregs.cs = cs;
  sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = ds;
  sregs.cr3 = PML4;
  sregs.cr4 = 1 << 5;                     /* PAE */
  sregs.cr0 = 0x80000011;                 /* PG, ET, PE */
  sregs.efer = (1 << 8) | (1 << 10);      /* LME, LMA */
  if (ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0) return fail("KVM_SET_SREGS");
  struct kvm_regs regs = {.rip = CODE, .rflags = 2, .rsp = 0x200000};
  if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0) return fail("KVM_SET_REGS");
  if (ioctl(vcpu, KVM_RUN, 0) < 0) return fail("KVM_RUN");
  if (run->exit_reason != KVM_EXIT_IO || run->io.port != 0xf4) {
    fprintf(stderr, "kvm_floor: unexpected exit %u\n", run->exit_reason);
    return 1;
  }
  return 0;
}
