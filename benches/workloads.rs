//! The guest's compute kernels run natively, against the yardsticks users
//! already trust: DGEMM against Debian's OpenBLAS single-threaded
//! `cblas_dgemm` (goal: ours >= 0.6x); XTS-AES-256 and AES-128-GCM per
//! variant at 512 B, 4 KiB and 64 KiB, each group printing the host's
//! `openssl speed -evp` for the same cipher and size beside it (`vmm run
//! --workload xts,gcm` reports the same comparison as ratios).
//!
//! OpenBLAS is loaded at run time (`libopenblas.so.0`, Debian package
//! `libopenblas0` / `libopenblas-dev`) so the project builds without it;
//! where it is missing the comparison is skipped with a message. Run with
//! `OPENBLAS_NUM_THREADS=1` for the single-thread figure (set here too).

use std::ffi::{c_char, c_int, c_void};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use guest::workloads::aes::gcm::{Gcm128, GcmKey, GcmVariant};
use guest::workloads::aes::xts::{Xts256, XtsKeys, XtsVariant};
use guest::workloads::{CpuFeatures, Dgemm, GemmVariant};
use vmm::bench::openssl::openssl_speed;

type CblasDgemm = unsafe extern "C" fn(
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    f64,
    *const f64,
    c_int,
    *const f64,
    c_int,
    f64,
    *mut f64,
    c_int,
);

const CBLAS_COL_MAJOR: c_int = 102;
const CBLAS_NO_TRANS: c_int = 111;

extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// `cblas_dgemm` from OpenBLAS, if installed.
fn openblas() -> Option<CblasDgemm> {
    std::env::set_var("OPENBLAS_NUM_THREADS", "1");
    let lib = c"libopenblas.so.0";
    let sym = c"cblas_dgemm";
    // SAFETY: dlopen/dlsym with NUL-terminated names; RTLD_NOW (2).
    let handle = unsafe { dlopen(lib.as_ptr(), 2) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: as above; the handle stays open for the process.
    let f = unsafe { dlsym(handle, sym.as_ptr()) };
    // SAFETY: `cblas_dgemm` has exactly this C signature.
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, CblasDgemm>(f) })
}

fn matrices(n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let a = (0..n * n).map(|_| next()).collect();
    let b = (0..n * n).map(|_| next()).collect();
    (a, b, vec![0.0; n * n])
}

fn dgemm(c: &mut Criterion) {
    let feat = CpuFeatures::detect();
    let blas = openblas();
    if blas.is_none() {
        eprintln!("workloads: libopenblas.so.0 not found (apt-get install libopenblas-dev): OpenBLAS yardstick skipped");
    }
    let mut g = c.benchmark_group("dgemm");
    g.sample_size(10);
    for n in [512usize, 1024] {
        g.throughput(Throughput::Elements((2 * n * n * n) as u64));
        let (a, b, mut cm) = matrices(n);
        for variant in [GemmVariant::Sse2, GemmVariant::Avx2Fma, GemmVariant::Avx512] {
            let Ok(k) = Dgemm::new(variant, &feat) else {
                continue;
            };
            let mut pack = vec![0.0; guest::workloads::gemm::PACK_LEN];
            g.bench_with_input(
                BenchmarkId::new(format!("{variant:?}"), n),
                &n,
                |bch, &n| {
                    bch.iter(|| {
                        k.gemm(n, n, n, 1.0, &a, n, &b, n, &mut cm, n, &mut pack)
                            .unwrap()
                    })
                },
            );
        }
        if let Some(f) = blas {
            g.bench_with_input(BenchmarkId::new("openblas", n), &n, |bch, &n| {
                let n32 = n as c_int;
                bch.iter(|| {
                    // SAFETY: column-major n x n matrices of exactly n*n
                    // elements each, leading dimension n.
                    unsafe {
                        f(
                            CBLAS_COL_MAJOR,
                            CBLAS_NO_TRANS,
                            CBLAS_NO_TRANS,
                            n32,
                            n32,
                            n32,
                            1.0,
                            a.as_ptr(),
                            n32,
                            b.as_ptr(),
                            n32,
                            1.0,
                            cm.as_mut_ptr(),
                            n32,
                        )
                    }
                })
            });
        }
    }
    g.finish();
}

/// Message sizes of the AES groups (the `vmm run --workload xts,gcm` sizes).
const AES_SIZES: [usize; 3] = [512, 4096, 65536];

/// Print openssl's figure for `cipher` at every size, as the yardstick.
fn print_openssl(cipher: &str) {
    for size in AES_SIZES {
        match openssl_speed(cipher, size as u64) {
            Ok(mb) => {
                eprintln!("workloads: openssl speed -evp {cipher} -bytes {size}: {mb:.0} MB/s")
            }
            Err(e) => eprintln!("workloads: {cipher} {size} B: {e}"),
        }
    }
}

fn aes_xts(c: &mut Criterion) {
    print_openssl("aes-256-xts");
    let feat = CpuFeatures::detect();
    let keys = XtsKeys::new(&[0x5a; 64]);
    let mut g = c.benchmark_group("aes-256-xts");
    for size in AES_SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0u8; size];
        for v in XtsVariant::ALL {
            let Ok(x) = Xts256::new(v, &feat) else {
                continue;
            };
            let mut unit = 0u128;
            g.bench_function(BenchmarkId::new(v.name(), size), |b| {
                b.iter(|| {
                    unit += 1;
                    x.encrypt_unit(&keys, unit, &mut buf).unwrap()
                })
            });
        }
    }
    g.finish();
}

fn aes_gcm(c: &mut Criterion) {
    print_openssl("aes-128-gcm");
    let feat = CpuFeatures::detect();
    let mut g = c.benchmark_group("aes-128-gcm");
    for size in AES_SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0u8; size];
        for v in GcmVariant::ALL {
            let Ok(gcm) = Gcm128::new(v, &feat) else {
                continue;
            };
            let key = GcmKey::new(gcm.expand_key(&[7; 16]));
            g.bench_function(BenchmarkId::new(v.name(), size), |b| {
                b.iter(|| gcm.encrypt(&key, &[1; 12], &[], &mut buf).unwrap())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, dgemm, aes_xts, aes_gcm);
criterion_main!(benches);
