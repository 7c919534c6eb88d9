// Fused optimizer updates: one launch per parameter update, replacing opt.py's sequence of
// one-op kernels. Each line below names the opt.py statement it stands for; the operations
// and their order are the same, each rounded once (singa_mul... never contract into FMAs), so
// a fused update equals the op-by-op one bit for bit on the same device.

// flags of singa_sgd, set by cupy_kernels.sgd_update
#define SINGA_SGD_DECAY 1       // weight_decay != 0
#define SINGA_SGD_MOMENTUM 2    // momentum != 0
#define SINGA_SGD_FIRST 4       // no momentum buffer yet: it starts as the gradient
#define SINGA_SGD_DAMPENING 8   // dampening != 0
#define SINGA_SGD_NESTEROV 16

template <typename T>
__global__ void singa_sgd(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf,
                          const T* __restrict__ lr_ptr, T lr_value, T weight_decay, T momentum,
                          T undampened, int flags, long long n) {
    const T lr = singa_scalar(lr_ptr, lr_value);
    SINGA_FOR(i, n) {
        const T w = p[i];
        T d = g[i];
        if (flags & SINGA_SGD_DECAY) d = singa_add(singa_mul(w, weight_decay), d);  // _decayed
        if (flags & SINGA_SGD_MOMENTUM) {
            T b;
            if (flags & SINGA_SGD_FIRST) {
                b = d;  // buf = g.copy()
            } else {
                b = singa_mul(buf[i], momentum);  // buf *= momentum
                // buf += g, or buf += (1 - dampening) * g
                b = singa_add(b, (flags & SINGA_SGD_DAMPENING) ? singa_mul(undampened, d) : d);
            }
            buf[i] = b;
            // Nesterov: d = buf * momentum; d += g
            d = (flags & SINGA_SGD_NESTEROV) ? singa_add(singa_mul(b, momentum), d) : b;
        }
        p[i] = singa_sub(w, singa_mul(lr, d));  // p -= lr * g
    }
}

// flags of singa_adam
#define SINGA_ADAM_L2 1         // Adam's weight_decay != 0: folded into the gradient
#define SINGA_ADAM_DECOUPLED 2  // AdamW's weight_decay != 0: p *= 1 - lr * weight_decay first

template <typename T>
__global__ void singa_adam(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                           T* __restrict__ v, const T* __restrict__ decay_ptr, T decay_value,
                           const T* __restrict__ bc2_ptr, T bc2_value,
                           const T* __restrict__ step_ptr, T step_value, T weight_decay, T beta_1,
                           T one_minus_beta_1, T beta_2, T one_minus_beta_2, T epsilon, int flags,
                           long long n) {
    const T decay = singa_scalar(decay_ptr, decay_value);  // 1 - lr * weight_decay
    const T bc2 = singa_scalar(bc2_ptr, bc2_value);        // sqrt(1 - beta_2 ** t)
    const T step = singa_scalar(step_ptr, step_value);     // lr / (1 - beta_1 ** t)
    SINGA_FOR(i, n) {
        T w = p[i];
        T d = g[i];
        if (flags & SINGA_ADAM_DECOUPLED) w = singa_mul(w, decay);  // p *= decay
        else if (flags & SINGA_ADAM_L2) d = singa_add(singa_mul(w, weight_decay), d);  // _decayed
        T s = singa_mul(d, one_minus_beta_1);                     // s = g * (1 - b1)
        const T mi = singa_add(singa_mul(m[i], beta_1), s);       // m *= b1; m += s
        s = singa_mul(singa_mul(d, d), one_minus_beta_2);         // s = g * g; s *= 1 - b2
        const T vi = singa_add(singa_mul(v[i], beta_2), s);       // v *= b2; v += s
        s = singa_div(singa_sqrt(vi), bc2);                       // s = sqrt(v); s /= bc2
        s = singa_add(s, epsilon);                                // s += eps
        s = singa_mul(singa_div(mi, s), step);                    // s = m / s; s *= lr_bc1
        m[i] = mi;
        v[i] = vi;
        p[i] = singa_sub(w, s);                                   // p -= s
    }
}
