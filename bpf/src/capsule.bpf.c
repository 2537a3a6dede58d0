// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// (The kernel runs metadata kfuncs only for GPL-compatible programs, hence the licence.)
//
// capsule's XDP program: hands every packet of an RX queue to the AF_XDP socket that
// capsule bound to that queue, with a 16-byte record in front of the packet saying when it
// arrived.
//
//   packet -> count SEEN
//          -> make room for the record, as the variant's carrier says:
//             metadata: grow the XDP metadata area by 16 bytes (bpf_xdp_adjust_meta)
//             headroom: claim 16 bytes of headroom (bpf_xdp_adjust_head); user space strips
//                       them, so the stored bytes are the wire's
//             none:     no record (kernels that refuse both; user space stamps at ring read)
//             -> ts_ns = kernel monotonic time now (bpf_ktime_get_ns)
//             -> device-bound variants only: the NIC's receive timestamp and the VLAN tag
//                the NIC stripped, through the XDP metadata kfuncs, where the driver has them
//          -> bpf_redirect_map(xsks, rx_queue_index); XDP_PASS when no socket is bound
//
// The layout of the metadata record and the counter indices are mirrored in
// bpf/src/lib.rs (struct Meta, enum Counter); change both together.
//
// Ten programs are built from one body: {metadata, headroom} x {kernel time, device kfuncs}
// x {single buffer, multi-buffer (xdp.frags, for MTUs above one page)}, and the plain
// redirect x {single, multi-buffer}. The loader probes which carrier the kernel accepts,
// then tries the richest program of that carrier the driver accepts and keeps only that.

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
	C_NO_ROOM = 6,
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

/* How the record reaches user space (the variant's carrier). */
#define CARRIER_META 0 /* in the XDP metadata area, before the packet (bpf_xdp_adjust_meta) */
#define CARRIER_HEAD 1 /* in headroom claimed in front of the packet (bpf_xdp_adjust_head) */
#define CARRIER_NONE 2 /* no record: user space stamps the packet when it reads the ring */

static __always_inline void fill(struct xdp_md *ctx, struct capsule_meta *m, const int device_bound)
{
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
}

// `device_bound` and `carrier` are constants in each program below, so clang drops the
// branches a variant does not take: a headroom or plain program never names
// bpf_xdp_adjust_meta, which some kernels refuse in XDP programs.
static __always_inline int capsule(struct xdp_md *ctx, const int device_bound, const int carrier)
{
	count(C_SEEN);
	if (carrier == CARRIER_META) {
		if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct capsule_meta)) == 0) {
			void *data = (void *)(long)ctx->data;
			struct capsule_meta *m = (void *)(long)ctx->data_meta;
			if ((void *)(m + 1) <= data)
				fill(ctx, m, device_bound);
			else
				count(C_META_FAILED);
		} else {
			count(C_META_FAILED);
		}
	} else if (carrier == CARRIER_HEAD) {
		// The record goes in front of the packet's first byte, inside the frame: user space
		// strips these 16 bytes before it stores the packet. Without room for them the
		// packet cannot be told from one that has a record, so it is not redirected: it is
		// counted (NO_ROOM, a drop in capsule's status) and passed to the kernel stack.
		if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct capsule_meta)) != 0) {
			count(C_NO_ROOM);
			return XDP_PASS;
		}
		void *end = (void *)(long)ctx->data_end;
		struct capsule_meta *m = (void *)(long)ctx->data;
		if ((void *)(m + 1) > end) {
			bpf_xdp_adjust_head(ctx, (int)sizeof(struct capsule_meta));
			count(C_NO_ROOM);
			return XDP_PASS;
		}
		fill(ctx, m, device_bound);
	}
	long action = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	if (carrier == CARRIER_HEAD && action != XDP_REDIRECT)
		// No socket on this queue: the kernel stack gets the packet as it arrived.
		bpf_xdp_adjust_head(ctx, (int)sizeof(struct capsule_meta));
	count(action == XDP_REDIRECT ? C_REDIRECTED : C_NO_SOCKET);
	return (int)action;
}

/* Ten programs: carrier x {kernel time, device kfuncs} x {single buffer, multi-buffer}. */
#define PROGRAM(name, section, device_bound, carrier)                                    \
	SEC(section)                                                                     \
	int name(struct xdp_md *ctx)                                                     \
	{                                                                                \
		return capsule(ctx, device_bound, carrier);                              \
	}

PROGRAM(capsule_xdp, "xdp", 0, CARRIER_META)
PROGRAM(capsule_xdp_frags, "xdp.frags", 0, CARRIER_META)
PROGRAM(capsule_xdp_dev, "xdp", 1, CARRIER_META)
PROGRAM(capsule_xdp_dev_frags, "xdp.frags", 1, CARRIER_META)
PROGRAM(capsule_xdp_head, "xdp", 0, CARRIER_HEAD)
PROGRAM(capsule_xdp_head_frags, "xdp.frags", 0, CARRIER_HEAD)
PROGRAM(capsule_xdp_head_dev, "xdp", 1, CARRIER_HEAD)
PROGRAM(capsule_xdp_head_dev_frags, "xdp.frags", 1, CARRIER_HEAD)
PROGRAM(capsule_xdp_plain, "xdp", 0, CARRIER_NONE)
PROGRAM(capsule_xdp_plain_frags, "xdp.frags", 0, CARRIER_NONE)

char LICENSE[] SEC("license") = "Dual BSD/GPL";
