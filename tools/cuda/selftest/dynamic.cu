// Dynamic shared memory (all of cubecl's shared memory is), plus a little static.
extern "C" __global__ void __launch_bounds__(256) dynamic_shared_kernel(const float* in, float* out, unsigned int n) {
    __shared__ float tile[256];
    extern __shared__ float dynamic[];
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.0f;
    dynamic[threadIdx.x] = 2.0f * tile[threadIdx.x];
    __syncthreads();
    if (i < n) {
        out[i] = tile[255 - threadIdx.x] + dynamic[(threadIdx.x + 1) % 256];
    }
}
