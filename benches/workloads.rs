//! The guest's compute kernels run natively, against the yardsticks users
//! already trust: DGEMM against Debian's OpenBLAS single-threaded
//! `cblas_dgemm` (goal: ours >= 0.6x), AES-128-CBC with legacy AES-NI
//! against `openssl speed` (see `vmm run`, which reports it).
//!
//! OpenBLAS is loaded at run time (`libopenblas.so.0`, Debian package
//! `libopenblas0` / `libopenblas-dev`) so the project builds without it;
//! where it is missing the comparison is skipped with a message. Run with
//! `OPENBLAS_NUM_THREADS=1` for the single-thread figure (set here too).

use std::ffi::{c_char, c_int, c_void};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use guest::workloads::{CpuFeatures, Dgemm, GemmVariant};

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

criterion_group!(benches, dgemm);
criterion_main!(benches);
