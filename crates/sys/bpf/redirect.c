// The XDP program of netsched's `xdp` port backend: every frame received on the interface's
// queue is redirected to the AF_XDP socket bound to that queue (the `xsks` XSKMAP, key = the
// queue index), and passed to the kernel's stack when no socket is bound there
// (bpf_redirect_map's flags argument is the action to return on a missing key; kernel
// Documentation/networking/af_xdp.rst, "XSKMAP / BPF_MAP_TYPE_XSKMAP").
//
// Self-contained on purpose: no libbpf headers, so Debian's `clang` alone builds it
// (`clang -target bpf -O2 -c redirect.c`). netsched-sys loads it with raw bpf(2) calls
// (crates/sys/src/bpf.rs): it creates the XSKMAP itself and points the one relocation against
// `xsks` at it, so the map's definition here only has to be a named symbol in section
// `maps`.

typedef unsigned int u32;
typedef unsigned long long u64;

// struct xdp_md, include/uapi/linux/bpf.h: the first five fields are u32.
struct xdp_md {
	u32 data;
	u32 data_end;
	u32 data_meta;
	u32 ingress_ifindex;
	u32 rx_queue_index;
};

// enum xdp_action, include/uapi/linux/bpf.h.
#define XDP_PASS 2

// BPF_FUNC_redirect_map is the kernel function with id 51 (include/uapi/linux/bpf.h, __BPF_FUNC_MAPPER).
static long (*bpf_redirect_map)(void *map, u64 key, u64 flags) = (void *)51;

// Placeholder for the XSKMAP the loader creates; only its symbol name matters.
char xsks[4] __attribute__((section("maps"), used));

__attribute__((section("xdp"), used)) int redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char netsched_license[] __attribute__((section("license"), used)) = "Dual MIT/GPL";
