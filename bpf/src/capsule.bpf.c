// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// (The kernel runs metadata kfuncs only for GPL-compatible programs, hence the licence.)
//
// capsule's XDP program: hands every packet of an RX queue to the AF_XDP socket that
// capsule bound to that queue, with a 16-byte metadata record in front of the packet
// saying when it arrived.
//
//   packet -> count SEEN
//          -> grow the metadata area by 16 bytes (bpf_xdp_adjust_meta)
//             -> ts_ns = kernel monotonic time now (bpf_ktime_get_ns)
//             -> device-bound variants only: the NIC's receive timestamp and the VLAN tag
//                the NIC stripped, through the XDP metadata kfuncs, where the driver has them
//          -> bpf_redirect_map(xsks, rx_queue_index); XDP_PASS when no socket is bound
//
// The layout of the metadata record and the counter indices are mirrored in
// bpf/src/lib.rs (struct Meta, enum Counter); change both together.
//
// Four programs are built from one body: {kernel time, device kfuncs} x {single buffer,
// multi-buffer (xdp.frags, for MTUs above one page)}. The loader tries the richest one
// the kernel and driver accept and keeps only that one.

#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

/* libbpf 1.1 (Debian 12) predates bpf_ksym_exists; a weak ksym that the kernel lacks is 0. */
#ifndef bpf_ksym_exists
#define bpf_ksym_exists(sym) (!!(sym))
#endif

#define CAPSULE_META_MAGIC 0xCA75
#define META_HW_TS 0x1
#define META_VLAN 0x2

struct capsule_meta {
	__u64 ts_ns;
	__u16 vlan_tci;
	__u16 vlan_proto; /* network byte order, as on the wire */
	__u16 flags;
	__u16 magic; /* last: it sits right before the packet's first byte */
};

enum {
	C_SEEN = 0,
	C_REDIRECTED = 1,
	C_NO_SOCKET = 2,
	C_META_FAILED = 3,
	C_HW_TS = 4,
	C_VLAN_META = 5,
	C_MAX = 8,
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// The metadata kfuncs (Linux 6.3 and 6.8). Weak, so the object loads on kernels without
// them; only the device-bound programs call them, guarded by bpf_ksym_exists.
extern int bpf_xdp_metadata_rx_timestamp(const struct xdp_md *ctx, __u64 *timestamp) __ksym __weak;
extern int bpf_xdp_metadata_rx_vlan_tag(const struct xdp_md *ctx, __be16 *vlan_proto,
					__u16 *vlan_tci) __ksym __weak;

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += 1; /* per-CPU slot: no other CPU writes it */
}

static __always_inline int capsule(struct xdp_md *ctx, const int device_bound)
{
	count(C_SEEN);
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct capsule_meta)) == 0) {
		void *data = (void *)(long)ctx->data;
		struct capsule_meta *m = (void *)(long)ctx->data_meta;
		if ((void *)(m + 1) <= data) {
			__u16 flags = 0;
			m->ts_ns = bpf_ktime_get_ns();
			m->vlan_tci = 0;
			m->vlan_proto = 0;
			if (device_bound) {
				__u64 hw = 0;
				__be16 proto = 0;
				__u16 tci = 0;
				if (bpf_ksym_exists(bpf_xdp_metadata_rx_timestamp) &&
				    bpf_xdp_metadata_rx_timestamp(ctx, &hw) == 0 && hw != 0) {
					m->ts_ns = hw;
					flags |= META_HW_TS;
					count(C_HW_TS);
				}
				if (bpf_ksym_exists(bpf_xdp_metadata_rx_vlan_tag) &&
				    bpf_xdp_metadata_rx_vlan_tag(ctx, &proto, &tci) == 0) {
					m->vlan_proto = proto;
					m->vlan_tci = tci;
					flags |= META_VLAN;
					count(C_VLAN_META);
				}
			}
			m->flags = flags;
			m->magic = CAPSULE_META_MAGIC;
		} else {
			count(C_META_FAILED);
		}
	} else {
		count(C_META_FAILED);
	}
	long action = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	count(action == XDP_REDIRECT ? C_REDIRECTED : C_NO_SOCKET);
	return (int)action;
}

SEC("xdp")
int capsule_xdp(struct xdp_md *ctx)
{
	return capsule(ctx, 0);
}

SEC("xdp.frags")
int capsule_xdp_frags(struct xdp_md *ctx)
{
	return capsule(ctx, 0);
}

SEC("xdp")
int capsule_xdp_dev(struct xdp_md *ctx)
{
	return capsule(ctx, 1);
}

SEC("xdp.frags")
int capsule_xdp_dev_frags(struct xdp_md *ctx)
{
	return capsule(ctx, 1);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
