//! The GPU backend's own kernels, as PTX text the driver JIT-compiles (no NVRTC needed).

/// An empty kernel and a read-only reduction over 16-byte vectors (grid-stride loop, one
/// xor per thread written out so the loads cannot be dropped). PTX ISA 7.0, sm_70: the driver
/// JIT-compiles it for any newer GPU.
pub const PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64
.visible .entry empty()
{
    ret;
}
.visible .entry read_xor(.param .u64 src, .param .u64 vectors, .param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<14>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [vectors];
    ld.param.u64 %rd3, [out];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.u64 %rd4, %rd4, %rd5;
    mov.u64 %rd12, %rd4;
    mul.wide.u32 %rd6, %r4, %r2;
    mov.u32 %r5, 0;
LOOP:
    setp.ge.u64 %p1, %rd4, %rd2;
    @%p1 bra DONE;
    shl.b64 %rd7, %rd4, 4;
    add.u64 %rd8, %rd1, %rd7;
    ld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd8];
    xor.b32 %r5, %r5, %r6;
    xor.b32 %r5, %r5, %r7;
    xor.b32 %r5, %r5, %r8;
    xor.b32 %r5, %r5, %r9;
    add.u64 %rd4, %rd4, %rd6;
    bra LOOP;
DONE:
    shl.b64 %rd9, %rd12, 2;
    add.u64 %rd10, %rd3, %rd9;
    st.global.u32 [%rd10], %r5;
    ret;
}
"#;
