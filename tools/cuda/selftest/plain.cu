// A plain kernel, shaped as cubecl-cpp emits one (extern "C", __launch_bounds__).
extern "C" __global__ void __launch_bounds__(256) plain_kernel(const float* a, const float* b, float* out, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a[i] * b[i] + 1.0f;
    }
}
