// Does not compile: NVRTC's log must reach the failure line.
extern "C" __global__ void broken_kernel(float* out) {
    out[threadIdx.x] = undeclared_value +;
}
