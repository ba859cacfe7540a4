// 1024 threads and 2 blocks per SM leave 32 registers a thread; 48 live floats spill.
extern "C" __global__ void __launch_bounds__(1024, 2) spill_kernel(const float* in, float* out) {
    float v[48];
    #pragma unroll
    for (int j = 0; j < 48; j++) v[j] = in[threadIdx.x * 48 + j];
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < 48; j++)
        #pragma unroll
        for (int k = 0; k < 48; k++) s += v[j] * v[k] * (float)(j ^ k);
    out[threadIdx.x] = s;
}
