//! Packets out onto an interface: whole link-layer frames sent through an AF_PACKET raw
//! socket bound to it (`capsule replay`). The socket code is capsule-sys's (`tx`); this is
//! its face for the replay: typed errors that say what was wrong with which interface, and a
//! send that tells the frames the interface refused (too long) from a queue that stayed
//! full and from an interface that went away.

use std::io;
use std::time::{Duration, Instant};

use capsule_sys::tx::{mtu_and_hwtype, PacketTx};

/// `ARPHRD_ETHER`: Ethernet and everything that looks like it (veth, bridges, bonds).
const ARPHRD_ETHER: u16 = 1;
/// `ARPHRD_LOOPBACK`: `lo`, which takes Ethernet-framed packets too.
const ARPHRD_LOOPBACK: u16 = 772;

/// How long a send waits out a full transmit queue (ENOBUFS) before giving the frame up.
const QUEUE_FULL_PATIENCE: Duration = Duration::from_millis(250);

/// Why an interface cannot be sent onto.
#[derive(Debug, thiserror::Error)]
pub enum TransmitError {
    #[error("no network interface named {iface:?}")]
    NoInterface { iface: String },
    #[error(
        "sending onto {iface} needs CAP_NET_RAW: run as root, or give the binary the \
         capability (`setcap cap_net_raw+ep capsule`)"
    )]
    NoPermission {
        iface: String,
        #[source]
        error: io::Error,
    },
    #[error(
        "{iface} has hardware type {hwtype}, not Ethernet (1) or loopback (772): replay \
         sends Ethernet frames"
    )]
    NotEthernet { iface: String, hwtype: u16 },
    #[error("cannot open a sending socket on {iface}")]
    Open {
        iface: String,
        #[source]
        error: io::Error,
    },
}

/// Why one frame was not sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The kernel refused its length (EMSGSIZE): over what the interface takes.
    #[error("the interface refused a {len}-byte frame as too long")]
    TooLong { len: usize },
    /// The transmit queue stayed full (ENOBUFS) for the whole wait.
    #[error("the transmit queue stayed full for {0:?}")]
    QueueFull(Duration),
    /// The interface is down or gone (ENETDOWN, ENXIO, ENODEV): nothing more can be sent.
    #[error("the interface is down or gone")]
    Down(#[source] io::Error),
    /// Any other failure of `send`.
    #[error("send failed")]
    Failed(#[source] io::Error),
}

impl SendError {
    /// Whether no later frame can be sent either (stop the replay).
    pub fn is_fatal(&self) -> bool {
        matches!(self, SendError::Down(_))
    }
}

/// An open sending socket on one interface.
#[derive(Debug)]
pub struct Transmitter {
    tx: PacketTx,
    iface: String,
    mtu: u32,
}

impl Transmitter {
    /// Opens `iface` for sending (needs CAP_NET_RAW). Refuses an interface that does not
    /// take Ethernet frames.
    pub fn open(iface: &str) -> Result<Transmitter, TransmitError> {
        let open_err = |error: io::Error| match error.kind() {
            io::ErrorKind::NotFound => TransmitError::NoInterface {
                iface: iface.to_string(),
            },
            io::ErrorKind::PermissionDenied => TransmitError::NoPermission {
                iface: iface.to_string(),
                error,
            },
            _ => TransmitError::Open {
                iface: iface.to_string(),
                error,
            },
        };
        let (mtu, hwtype) = mtu_and_hwtype(iface).map_err(open_err)?;
        if hwtype != ARPHRD_ETHER && hwtype != ARPHRD_LOOPBACK {
            return Err(TransmitError::NotEthernet {
                iface: iface.to_string(),
                hwtype,
            });
        }
        let tx = PacketTx::open(iface).map_err(open_err)?;
        Ok(Transmitter {
            tx,
            iface: iface.to_string(),
            mtu,
        })
    }

    /// The interface's name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.tx.ifindex()
    }

    /// The interface's MTU (bytes of payload after the link-layer header), as it was when
    /// opened.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Sends one whole frame (link-layer header first). A full transmit queue is waited
    /// out for up to 250 ms.
    pub fn send(&mut self, frame: &[u8]) -> Result<(), SendError> {
        let mut waited: Option<Instant> = None;
        loop {
            let Err(e) = self.tx.send(frame) else {
                return Ok(());
            };
            match e.raw_os_error() {
                Some(libc::EMSGSIZE) => return Err(SendError::TooLong { len: frame.len() }),
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) => {
                    let since = *waited.get_or_insert_with(Instant::now);
                    if since.elapsed() >= QUEUE_FULL_PATIENCE {
                        return Err(SendError::QueueFull(QUEUE_FULL_PATIENCE));
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
                Some(libc::EINTR) => {}
                Some(libc::ENETDOWN) | Some(libc::ENXIO) | Some(libc::ENODEV) => {
                    return Err(SendError::Down(e.into()))
                }
                _ => return Err(SendError::Failed(e.into())),
            }
        }
    }
}
