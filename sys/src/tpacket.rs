//! The AF_PACKET TPACKET_V3 receive ring.
//!
//! The kernel and capsule share a memory-mapped ring of `block_nr` blocks of `block_size`
//! bytes. The kernel fills a block with packets, then hands it over by setting
//! `TP_STATUS_USER` in the block's status word; capsule reads every packet of the block and
//! hands it back by storing `TP_STATUS_KERNEL` (0). Blocks are used strictly in order.
//! Nothing else is shared: a block belongs either to the kernel or to capsule, and the status
//! word, read and written atomically, decides which.
//!
//! Memory ordering (kernel: net/packet/af_packet.c):
//! * capsule loads the status with `Acquire`. It pairs with `prb_close_block()`, which issues
//!   `smp_wmb()` after writing the block's packets and before `BLOCK_STATUS(pbd1) =
//!   TP_STATUS_USER`: once capsule sees `TP_STATUS_USER`, the packets are visible.
//! * capsule stores `TP_STATUS_KERNEL` with `Release` after its last read of the block. It
//!   pairs with `prb_lookup_block()`/`__packet_get_status()`, which read the status (with
//!   `smp_rmb()`) before the kernel writes into the block again: the kernel never overwrites
//!   packets capsule is still reading.
//!
//! Every value read from the ring (offsets, lengths, counts) is checked against the block's
//! bounds before use, so even a ring in an unexpected state cannot make capsule read outside
//! the mapping.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use capsule_wire::view::{Endian, View};

use crate::error::check;
use crate::iface::if_index;
use crate::mapping::Mapping;
use crate::socket::{
    add_promiscuous, bind_packet, getsockopt, setsockopt, socket, take_socket_error,
};

/// Size and shape of the ring.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    /// Bytes per block (a multiple of the page size).
    pub block_size: u32,
    /// Number of blocks.
    pub block_nr: u32,
    /// A block is handed to capsule at the latest this long after its first packet.
    pub retire_ms: u32,
    /// PACKET_FANOUT group id (hash fanout, defragmenting), so several sockets can share the
    /// interface's traffic; 0 disables fanout.
    pub fanout_group: u16,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            block_size: 1 << 22,
            block_nr: 64,
            retire_ms: 50,
            fanout_group: 0,
        }
    }
}

/// One received packet, borrowed from the ring.
#[derive(Debug, Clone, Copy)]
pub struct RingPacket<'a> {
    /// Kernel receive time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// Length on the wire (without the stripped VLAN tag, if any).
    pub len: u32,
    /// The captured bytes, from the link-layer header on.
    pub data: &'a [u8],
    /// A VLAN tag the kernel (or NIC) removed from the frame: (TPID, TCI).
    pub vlan: Option<(u16, u16)>,
}

/// A TPACKET_V3 receive ring bound to one interface.
#[derive(Debug)]
pub struct PacketRing {
    // Field order is drop order: the ring is unmapped, then the socket closed.
    map: Mapping,
    fd: OwnedFd,
    block_size: usize,
    block_nr: usize,
    next: usize,
}

// SAFETY: the mapping is owned by this value alone (no other Rust value points into it), and
// the kernel's side of the sharing is synchronized through the status words as described in
// the module docs; moving the owner to another thread changes nothing about that.
unsafe impl Send for PacketRing {}

impl PacketRing {
    /// Opens a packet socket on `iface`, maps its ring, puts the interface in promiscuous
    /// mode (for this socket's lifetime) and binds the socket to it.
    pub fn open(iface: &str, cfg: &RingConfig) -> io::Result<PacketRing> {
        let ifindex = if_index(iface)?;
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // Protocol 0: the socket receives nothing until `bind` names the interface and the
        // protocol, after the ring is ready; with ETH_P_ALL here it would take every
        // interface's packets (the management port's too) until then.
        let fd = socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            "(needs root or CAP_NET_RAW)",
        )?;

        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
            "PACKET_VERSION TPACKET_V3",
        )?;
        let frame_size = 2048u32;
        if !cfg.block_size.is_multiple_of(4096) || cfg.block_size < frame_size || cfg.block_nr == 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "ring block size {} must be a multiple of 4096, with at least one block",
                    cfg.block_size
                ),
            ));
        }
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.block_nr,
            tp_frame_size: frame_size,
            tp_frame_nr: cfg.block_size / frame_size * cfg.block_nr,
            tp_retire_blk_tov: cfg.retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "PACKET_RX_RING",
        )?;
        // The ring the kernel just allocated for this descriptor, its whole length.
        let map_len = cfg.block_size as usize * cfg.block_nr as usize;
        let map = Mapping::socket(&fd, map_len, 0, &format!("the {map_len}-byte ring"))?;
        let ring = PacketRing::over(map, fd, cfg);

        add_promiscuous(&ring.fd, ifindex)?;
        bind_packet(&ring.fd, ifindex, proto, &format!("to {iface}"))?;
        if cfg.fanout_group != 0 {
            let arg: u32 = u32::from(cfg.fanout_group)
                | ((libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG) << 16);
            setsockopt(
                &ring.fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &arg,
                "PACKET_FANOUT",
            )?;
        }
        Ok(ring)
    }

    /// The ring over `map`, the ring socket `fd` shares with the kernel (`cfg.block_nr`
    /// blocks of `cfg.block_size` bytes), to be read from its first block. In unit tests
    /// `map` is heap memory and the fake kernel's (`fake.rs`).
    pub(crate) fn over(map: Mapping, fd: OwnedFd, cfg: &RingConfig) -> PacketRing {
        let (block_size, block_nr) = (cfg.block_size as usize, cfg.block_nr as usize);
        // What `status` relies on: whole pages, all inside the mapping (`open` checked the
        // configuration before asking the kernel for the ring).
        assert!(block_size.is_multiple_of(4096) && block_nr > 0);
        assert!(map.len() >= block_size * block_nr);
        PacketRing {
            map,
            fd,
            block_size,
            block_nr,
            next: 0,
        }
    }

    /// The status word of block `i`, as an atomic shared with the kernel.
    fn status(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i < self.block_nr);
        // SAFETY: block `i` starts inside the mapping (i < block_nr, and the mapping is at
        // least block_size * block_nr bytes long, checked in `over`), block starts are
        // page-aligned (the mapping is, and block_size is whole pages, checked in `over`),
        // and `hdr.bh1.block_status` is the u32 at offset 8 of
        // `tpacket_block_desc` (4-byte aligned), so the pointer is valid and aligned for an
        // AtomicU32 for as long as `self` (and so the mapping) lives. The kernel accesses the
        // word only with its own atomic-width stores and loads, paired as the module docs say.
        unsafe {
            let block = self.map.ptr().add(i * self.block_size);
            let desc = block.cast::<libc::tpacket_block_desc>();
            let status = std::ptr::addr_of_mut!((*desc).hdr.bh1.block_status);
            AtomicU32::from_ptr(status)
        }
    }

    /// Blocks the kernel has handed over that capsule has not read yet.
    pub fn backlog(&self) -> usize {
        (0..self.block_nr)
            .take_while(|j| {
                let i = (self.next + j) % self.block_nr;
                self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
            })
            .count()
    }

    /// Number of blocks in the ring.
    pub fn blocks(&self) -> usize {
        self.block_nr
    }

    /// Waits up to `timeout` for the next block to be handed over, calls `f` with each of its
    /// packets, and gives the block back. Returns the number of packets (0 on timeout).
    pub fn next_block(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(RingPacket<'_>),
    ) -> io::Result<usize> {
        let i = self.next;
        if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
            // SAFETY: `pfd` is a valid pollfd array of length 1 for the duration of the call.
            let ret = unsafe { libc::poll(&mut pfd, 1, ms) };
            match check("poll", ret) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
                Err(e) => return Err(e.into()),
                Ok(_) => {}
            }
            if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                if pfd.revents & libc::POLLERR != 0 {
                    // The link went down (ENETDOWN) or away (ENODEV): poll would return at
                    // once forever. Take the error, fail if the interface is gone, otherwise
                    // wait out the timeout so a down link costs no CPU.
                    let err = take_socket_error(&self.fd)?;
                    if err == libc::ENODEV || err == libc::ENXIO {
                        return Err(io::Error::from_raw_os_error(err));
                    }
                    std::thread::sleep(timeout);
                }
                return Ok(0);
            }
        }
        // SAFETY: the Acquire load above saw TP_STATUS_USER, so the kernel has finished
        // writing this block and will not touch it until we store TP_STATUS_KERNEL below; the
        // slice covers exactly block `i`, inside the mapping.
        let block: &[u8] = unsafe {
            std::slice::from_raw_parts(self.map.ptr().add(i * self.block_size), self.block_size)
        };
        let n = parse_block(block, &mut f);
        self.status(i)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (i + 1) % self.block_nr;
        Ok(n)
    }

    /// Reads (and so resets) the socket's kernel counters: packets received (kept or dropped),
    /// dropped because the ring was full, and the times the ring froze (all blocks owned by
    /// capsule), since the previous read.
    pub fn stats(&self) -> io::Result<libc::tpacket_stats_v3> {
        let (st, _) = getsockopt::<libc::tpacket_stats_v3>(
            &self.fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            "PACKET_STATISTICS",
        )?;
        Ok(st)
    }
}

// Offsets in struct tpacket_block_desc / tpacket_hdr_v1 and struct tpacket3_hdr
// (include/uapi/linux/if_packet.h), in host byte order.
const BD_NUM_PKTS: usize = 12;
const BD_OFFSET_TO_FIRST: usize = 16;
/// The block descriptor's fields capsule reads end here.
const BD_LEN: usize = 20;
const H3_NEXT: usize = 0;
const H3_SEC: usize = 4;
const H3_NSEC: usize = 8;
const H3_SNAPLEN: usize = 12;
const H3_LEN: usize = 16;
const H3_STATUS: usize = 20;
const H3_MAC: usize = 24;
const H3_VLAN_TCI: usize = 32;
const H3_VLAN_TPID: usize = 36;
/// The packet header's fields capsule reads end here (the kernel's header is 48 bytes).
const H3_READ_LEN: usize = 40;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const NE: Endian = Endian::NATIVE;

/// Walks the packets of one block (owned by user space), with every offset checked.
fn parse_block(block: &[u8], f: &mut impl FnMut(RingPacket<'_>)) -> usize {
    let Ok(bd) = View::<BD_LEN>::at(block, 0) else {
        return 0;
    };
    let (num, first) = (
        bd.u32_in::<BD_NUM_PKTS>(NE),
        bd.u32_in::<BD_OFFSET_TO_FIRST>(NE),
    );
    let mut at = first as usize;
    let mut n = 0;
    for _ in 0..num {
        let Some(h) = block.get(at..) else { break };
        let Ok(h3) = View::<H3_READ_LEN>::at(h, 0) else {
            break;
        };
        let (next, sec, nsec, snap, len, status, mac) = (
            h3.u32_in::<H3_NEXT>(NE),
            h3.u32_in::<H3_SEC>(NE),
            h3.u32_in::<H3_NSEC>(NE),
            h3.u32_in::<H3_SNAPLEN>(NE),
            h3.u32_in::<H3_LEN>(NE),
            h3.u32_in::<H3_STATUS>(NE),
            h3.u16_in::<H3_MAC>(NE),
        );
        let Some(data) = h.get(mac as usize..mac as usize + snap as usize) else {
            break;
        };
        let vlan = (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tci = h3.u32_in::<H3_VLAN_TCI>(NE) as u16;
            let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                h3.u16_in::<H3_VLAN_TPID>(NE)
            } else {
                0x8100
            };
            (tpid, tci)
        });
        f(RingPacket {
            ts_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
            len,
            data,
            vlan,
        });
        n += 1;
        if next == 0 {
            break;
        }
        at += next as usize;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{TpacketKernel, NOTHING_WAIT};

    /// A block laid out as the kernel does: descriptor, then packets linked by next offsets.
    fn block(packets: &[(&[u8], Option<u16>)]) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[BD_NUM_PKTS..BD_NUM_PKTS + 4].copy_from_slice(&(packets.len() as u32).to_ne_bytes());
        b[BD_OFFSET_TO_FIRST..BD_OFFSET_TO_FIRST + 4].copy_from_slice(&48u32.to_ne_bytes());
        let mut at = 48;
        for (k, (data, vlan)) in packets.iter().enumerate() {
            let mac = 68u16;
            let next = if k + 1 == packets.len() {
                0
            } else {
                (mac as usize + data.len() + 15) & !15
            };
            let h = &mut b[at..];
            h[H3_NEXT..H3_NEXT + 4].copy_from_slice(&(next as u32).to_ne_bytes());
            h[H3_SEC..H3_SEC + 4].copy_from_slice(&(1000 + k as u32).to_ne_bytes());
            h[H3_NSEC..H3_NSEC + 4].copy_from_slice(&7u32.to_ne_bytes());
            h[H3_SNAPLEN..H3_SNAPLEN + 4].copy_from_slice(&(data.len() as u32).to_ne_bytes());
            h[H3_LEN..H3_LEN + 4].copy_from_slice(&(data.len() as u32 + 10).to_ne_bytes());
            let status = if vlan.is_some() {
                libc::TP_STATUS_VLAN_VALID
            } else {
                0
            };
            h[H3_STATUS..H3_STATUS + 4].copy_from_slice(&status.to_ne_bytes());
            h[H3_MAC..H3_MAC + 2].copy_from_slice(&mac.to_ne_bytes());
            if let Some(v) = vlan {
                h[H3_VLAN_TCI..H3_VLAN_TCI + 4].copy_from_slice(&u32::from(*v).to_ne_bytes());
            }
            h[mac as usize..mac as usize + data.len()].copy_from_slice(data);
            at += next;
        }
        b
    }

    #[test]
    fn packets_of_a_block_are_walked_with_their_metadata() {
        let b = block(&[(&[1, 2, 3], None), (&[4; 100], Some(100))]);
        let mut got = Vec::new();
        let n = parse_block(&b, &mut |p: RingPacket<'_>| {
            got.push((p.ts_ns, p.len, p.data.to_vec(), p.vlan))
        });
        assert_eq!(n, 2);
        assert_eq!(got[0], (1_000_000_000_007, 13, vec![1, 2, 3], None));
        assert_eq!(
            got[1],
            (1_001_000_000_007, 110, vec![4; 100], Some((0x8100, 100)))
        );
    }

    #[test]
    fn a_block_with_lying_offsets_is_cut_short_not_overrun() {
        let mut b = block(&[(&[1, 2, 3], None), (&[4; 10], None)]);
        // Claim 50 packets, and a snap length running past the block.
        b[BD_NUM_PKTS..BD_NUM_PKTS + 4].copy_from_slice(&50u32.to_ne_bytes());
        let second = 48 + ((68 + 3 + 15) & !15);
        b[second + H3_SNAPLEN..second + H3_SNAPLEN + 4].copy_from_slice(&100_000u32.to_ne_bytes());
        let mut n = 0;
        parse_block(&b, &mut |_p: RingPacket<'_>| n += 1);
        assert_eq!(n, 1);
        assert_eq!(parse_block(&[0u8; 8], &mut |_p: RingPacket<'_>| {}), 0);
    }

    #[test]
    fn blocks_are_read_in_order_and_handed_back_round_the_ring() {
        let mut k = TpacketKernel::new(3);
        let mut seen = Vec::new();
        for round in 0..3u8 {
            for b in 0..3u8 {
                assert!(k.hand_over(&block(&[(&[round, b], None), (&[b], Some(7))])));
            }
            // Every block is capsule's: the kernel has nowhere to write.
            assert!(!k.hand_over(&block(&[(&[99], None)])));
            assert_eq!(k.ring.backlog(), 3);
            for left in (0..3).rev() {
                let n = k
                    .ring
                    .next_block(NOTHING_WAIT, |p| seen.push((p.data.to_vec(), p.vlan)))
                    .unwrap();
                assert_eq!((n, k.ring.backlog()), (2, left));
            }
            for i in 0..3 {
                let status = k.status(i).load(Ordering::Acquire);
                assert_eq!(status, libc::TP_STATUS_KERNEL, "block {i}, round {round}");
            }
        }
        let want: Vec<_> = (0..3u8)
            .flat_map(|r| {
                (0..3u8).flat_map(move |b| [(vec![r, b], None), (vec![b], Some((0x8100, 7)))])
            })
            .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn an_empty_ring_is_waited_on_and_read_on_from_where_it_was() {
        let mut k = TpacketKernel::new(2);
        assert!(k.hand_over(&block(&[(&[1], None)])));
        let mut seen = Vec::new();
        let mut read = |k: &mut TpacketKernel| {
            k.ring
                .next_block(NOTHING_WAIT, |p| seen.push(p.data.to_vec()))
                .unwrap()
        };
        assert_eq!(read(&mut k), 1);
        // Nothing handed over: the read waits out its timeout on the socket, takes nothing,
        // and does not move on.
        let t = std::time::Instant::now();
        assert_eq!(read(&mut k), 0);
        assert!(t.elapsed() >= NOTHING_WAIT / 2, "{:?}", t.elapsed());
        assert_eq!(k.status(1).load(Ordering::Acquire), libc::TP_STATUS_KERNEL);
        // The next block handed over (block 1, then block 0 again) is the next one read.
        assert!(k.hand_over(&block(&[(&[2], None)])));
        assert!(k.hand_over(&block(&[(&[3], None)])));
        assert_eq!(k.ring.backlog(), 2);
        assert_eq!((read(&mut k), read(&mut k), read(&mut k)), (1, 1, 0));
        assert_eq!(seen, [vec![1], vec![2], vec![3]]);
    }
}
