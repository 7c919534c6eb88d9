// Helpers shared by every kernel source in this folder. The loader (backend/cupy_kernels.py)
// puts this text in front of each source instead of an #include: CuPy keys its kernel cache
// by the source text, so an edited header could otherwise hit a stale cached binary.

// Round-to-nearest arithmetic the compiler may not contract into fused multiply-adds. A fused
// kernel then rounds exactly where the sequence of one-op CuPy kernels it replaces rounds.
__device__ __forceinline__ float singa_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double singa_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float singa_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double singa_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float singa_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double singa_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float singa_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double singa_div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float singa_sqrt(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double singa_sqrt(double a) { return __dsqrt_rn(a); }
// The functions CuPy's exp and log ufuncs call for each type.
__device__ __forceinline__ float singa_exp(float a) { return expf(a); }
__device__ __forceinline__ double singa_exp(double a) { return exp(a); }
__device__ __forceinline__ float singa_log(float a) { return logf(a); }
__device__ __forceinline__ double singa_log(double a) { return log(a); }

template <typename T> __device__ __forceinline__ T singa_inf();
template <> __device__ __forceinline__ float singa_inf<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double singa_inf<double>() {
    return __longlong_as_double(0x7ff0000000000000LL);
}

template <typename T> __device__ __forceinline__ T singa_nan();
template <> __device__ __forceinline__ float singa_nan<float>() { return __int_as_float(0x7fc00000); }
template <> __device__ __forceinline__ double singa_nan<double>() {
    return __longlong_as_double(0x7ff8000000000000LL);
}

// A per-step scalar (learning rate, bias correction): read from device memory when the caller
// passed a 0-d array (a CUDA graph replays this launch, and must see the replayed step's
// value), else the number passed by value. The wrapper passes a null pointer for a number.
template <typename T>
__device__ __forceinline__ T singa_scalar(const T* __restrict__ ptr, T value) {
    return ptr != nullptr ? *ptr : value;
}

// A grid-stride loop over [0, n): any grid size covers any n.
#define SINGA_FOR(i, n)                                                                  \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);        \
         i += (long long)gridDim.x * blockDim.x)

// A flat index over (planes, d0, d1, d2) as its plane and its three coordinates (the pool
// kernels walk every output cell, or every input cell, of every plane this way).
struct SingaCell {
    long long plane;
    int i0, i1, i2;
};
__device__ __forceinline__ SingaCell singa_cell_of(long long flat, int d0, int d1, int d2) {
    const long long per_plane = (long long)d0 * d1 * d2;
    SingaCell cell;
    cell.plane = flat / per_plane;
    long long r = flat - cell.plane * per_plane;
    cell.i2 = r % d2;
    r /= d2;
    cell.i1 = r % d1;
    cell.i0 = r / d1;
    return cell;
}
