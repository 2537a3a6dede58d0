//! The object-store client: object_store's S3 implementation, driven from plain threads
//! through a small runtime of its own, with the checks capsule needs around each upload.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as Key;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

use capsule_config::TierConfig;

use crate::error::TierError;

/// Objects larger than this are uploaded in parts of this size (multipart upload).
pub const PART_BYTES: u64 = 8 << 20;

/// A connection to the `[tier]` bucket.
#[derive(Debug)]
pub struct Client {
    s3: AmazonS3,
    rt: tokio::runtime::Runtime,
    prefix: String,
    /// `endpoint/bucket`, for messages.
    url: String,
    /// Bytes read from the object store by range GETs (tier_fetched_bytes).
    fetched: Arc<AtomicU64>,
    pub(crate) cache: crate::remote::BlockCache,
    config: TierConfig,
    /// `[tier] upload_rate`: when each upload may start.
    pacer: Option<Pacer>,
}

/// Holds the uploads to an average rate: each part or object reserves its time on the line
/// (its bits over the rate) after the reservations before it, and starts when its time
/// comes. A part goes out at the link's speed; the average over the parts is the rate.
#[derive(Debug)]
pub(crate) struct Pacer {
    bits_per_second: u64,
    next: Mutex<Option<Instant>>,
}

impl Pacer {
    pub(crate) fn new(bits_per_second: u64) -> Self {
        Pacer {
            bits_per_second: bits_per_second.max(1),
            next: Mutex::new(None),
        }
    }

    /// Reserves the line for `bytes` from `now` on: when they may start.
    pub(crate) fn reserve(&self, bytes: u64, now: Instant) -> Instant {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let start = next.map_or(now, |n| n.max(now));
        let on_the_line = Duration::from_secs_f64(bytes as f64 * 8.0 / self.bits_per_second as f64);
        *next = Some(start + on_the_line);
        start
    }
}

/// The access key id and the secret: the first two non-empty lines of `path`.
fn credentials(path: &Path) -> Result<(String, String), TierError> {
    let bad = |detail: String| TierError::Credentials {
        path: path.to_path_buf(),
        detail,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines.as_slice() {
        [id, secret] => Ok((id.to_string(), secret.to_string())),
        _ => Err(bad(format!(
            "expected two lines, the access key id then the secret; found {} non-empty line(s)",
            lines.len()
        ))),
    }
}

/// The S3 ETag of `parts` uploaded as one PUT (one part: its MD5) or as a multipart upload
/// (the MD5 of the parts' MD5s, then `-N`), without quotes.
pub(crate) fn expected_etag(part_md5s: &[[u8; 16]]) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    match part_md5s {
        [one] => hex(one),
        many => {
            let mut h = Md5::new();
            many.iter().for_each(|m| h.update(m));
            format!("{}-{}", hex(&h.finalize()), many.len())
        }
    }
}

fn unquote(etag: Option<&str>) -> String {
    etag.unwrap_or("").trim_matches('"').to_string()
}

impl Client {
    /// Connects to the bucket `[tier]` names (no request is made yet): the readers' client.
    pub fn new(config: &TierConfig) -> Result<Client, TierError> {
        Client::build(config, false)
    }

    /// The writers' client (capture, import): the threads of its connections run at the
    /// background's CPU and I/O priority (capsule_sys::prio), as the uploader's own does,
    /// so that uploading never takes what capture needs.
    pub fn for_uploads(config: &TierConfig) -> Result<Client, TierError> {
        Client::build(config, true)
    }

    fn build(config: &TierConfig, background: bool) -> Result<Client, TierError> {
        let (id, secret) = credentials(&config.credentials_file)?;
        let s3 = AmazonS3Builder::new()
            .with_endpoint(&config.endpoint)
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_access_key_id(id)
            .with_secret_access_key(secret)
            .with_allow_http(config.endpoint.starts_with("http://"))
            .with_virtual_hosted_style_request(!config.path_style)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_retry(object_store::RetryConfig {
                max_retries: 2,
                retry_timeout: std::time::Duration::from_secs(10),
                ..Default::default()
            })
            .build()
            .map_err(|source| TierError::Setup {
                what: "endpoint, bucket or region",
                source: Box::new(source),
            })?;
        let mut rt = tokio::runtime::Builder::new_multi_thread();
        rt.worker_threads(1)
            .thread_name("capsule-tier")
            .enable_all();
        if background {
            rt.on_thread_start(crate::upload::lower_priority);
        }
        let rt = rt.build().map_err(|source| TierError::Io {
            op: "start the object-store client",
            path: config.credentials_file.clone(),
            source,
        })?;
        Ok(Client {
            s3,
            rt,
            prefix: config.prefix.clone(),
            url: format!("{}/{}", config.endpoint, config.bucket),
            fetched: Arc::new(AtomicU64::new(0)),
            cache: crate::remote::BlockCache::new(crate::remote::CACHE_BYTES),
            config: config.clone(),
            pacer: config.upload_rate_bps.map(Pacer::new),
        })
    }

    /// Waits until `[tier] upload_rate` lets `bytes` go (at once without one); `Err` when
    /// `stop` is set meanwhile.
    fn pace(&self, bytes: u64, key: &str, stop: &AtomicBool) -> Result<(), TierError> {
        let Some(p) = &self.pacer else {
            return Ok(());
        };
        let start = p.reserve(bytes, Instant::now());
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(TierError::Stopped {
                    key: key.to_string(),
                });
            }
            let now = Instant::now();
            if now >= start {
                return Ok(());
            }
            std::thread::sleep((start - now).min(Duration::from_millis(50)));
        }
    }

    /// The `[tier]` section this client was made from.
    pub fn config(&self) -> &TierConfig {
        &self.config
    }

    /// `endpoint/bucket`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The key of `name` under the prefix: never with a leading "/".
    pub fn key(&self, name: &str) -> String {
        key_of(&self.prefix, name)
    }

    /// Bytes fetched by range GETs so far.
    pub fn fetched_bytes(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }

    fn request(&self, op: &'static str, key: &str, source: object_store::Error) -> TierError {
        TierError::Request {
            url: self.url.clone(),
            op,
            key: key.to_string(),
            source: Box::new(source),
        }
    }

    /// The size and ETag (unquoted) of the object at `key`; `None` when there is none.
    pub fn head(&self, key: &str) -> Result<Option<(u64, String)>, TierError> {
        match self.rt.block_on(self.s3.head(&Key::from(key))) {
            Ok(m) => Ok(Some((m.size, unquote(m.e_tag.as_deref())))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.request("HEAD", key, e)),
        }
    }

    /// Bytes `range` of the object at `key` (counted in [`Client::fetched_bytes`]).
    pub fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes, TierError> {
        let b = self
            .rt
            .block_on(self.s3.get_range(&Key::from(key), range))
            .map_err(|e| self.request("GET", key, e))?;
        self.fetched.fetch_add(b.len() as u64, Ordering::Relaxed);
        Ok(b)
    }

    /// The whole object at `key` (counted in [`Client::fetched_bytes`]); `None` when there
    /// is none.
    pub fn get(&self, key: &str) -> Result<Option<bytes::Bytes>, TierError> {
        let got = self.rt.block_on(async {
            match self.s3.get(&Key::from(key)).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        let got = got.map_err(|e| self.request("GET", key, e))?;
        if let Some(b) = &got {
            self.fetched.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        Ok(got)
    }

    /// Deletes the object at `key` (none there is fine).
    pub fn delete(&self, key: &str) -> Result<(), TierError> {
        match self.rt.block_on(self.s3.delete(&Key::from(key))) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.request("DELETE", key, e)),
        }
    }

    /// Uploads file `path` to `key` and checks it there; returns the object's ETag.
    ///
    /// A retry never overwrites a different object: an object already at the key is taken
    /// as this upload's when its size and ETag are this file's, and refused
    /// ([`TierError::Conflict`]) otherwise. A file up to [`PART_BYTES`] goes in one PUT with
    /// If-None-Match (the object store refuses it when the key is taken meanwhile); a larger
    /// one in parts, completed only once every part is in (an interrupted upload leaves no
    /// object). After the upload, the object's size and ETag must be the file's. With
    /// `[tier] upload_rate`, each part waits its turn; `stop` ends the wait (and the upload:
    /// nothing is recorded, the next writer uploads it).
    pub fn upload_file(
        &self,
        path: &Path,
        key: &str,
        stop: &AtomicBool,
    ) -> Result<String, TierError> {
        let io = |op, source| TierError::Io {
            op,
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(|e| io("open for upload", e))?;
        let len = file.metadata().map_err(|e| io("stat for upload", e))?.len();
        let read_part = |i: u64| -> Result<Vec<u8>, TierError> {
            let at = i * PART_BYTES;
            let mut buf = vec![0u8; (len - at).min(PART_BYTES) as usize];
            file.read_exact_at(&mut buf, at)
                .map_err(|e| io("read for upload", e))?;
            Ok(buf)
        };
        let parts = len.div_ceil(PART_BYTES).max(1);
        let mut md5s = Vec::with_capacity(parts as usize);
        for i in 0..parts {
            md5s.push(Md5::digest(read_part(i)?).into());
        }
        let want = expected_etag(&md5s);
        let conflict = |found: u64, found_etag: String| TierError::Conflict {
            url: self.url.clone(),
            key: key.to_string(),
            found,
            found_etag,
            expected: len,
            expected_etag: want.clone(),
        };
        // An object already there: this upload's, done before a crash, or someone else's.
        if let Some((size, etag)) = self.head(key)? {
            return if size == len && etag == want {
                Ok(etag)
            } else {
                Err(conflict(size, etag))
            };
        }
        let k = Key::from(key);
        if parts == 1 {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            let data = PutPayload::from(read_part(0)?);
            self.pace(len, key, stop)?;
            match self.rt.block_on(self.s3.put_opts(&k, data, opts)) {
                Ok(_) => {}
                Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(self.request("PUT", key, e)),
            }
        } else {
            let mut up = self
                .rt
                .block_on(self.s3.put_multipart(&k))
                .map_err(|e| self.request("start multipart upload of", key, e))?;
            let mut sent = Ok(());
            for i in 0..parts {
                let part = read_part(i).and_then(|b| {
                    self.pace(b.len() as u64, key, stop)?;
                    self.rt
                        .block_on(up.put_part(PutPayload::from(b)))
                        .map_err(|e| self.request("PUT part of", key, e))
                });
                if let Err(e) = part {
                    sent = Err(e);
                    break;
                }
            }
            if let Err(e) = sent {
                let _ = self.rt.block_on(up.abort());
                return Err(e);
            }
            self.rt
                .block_on(up.complete())
                .map_err(|e| self.request("complete multipart upload of", key, e))?;
        }
        match self.head(key)? {
            Some((size, etag)) if size == len && etag == want => Ok(etag),
            Some((size, etag)) if size == len => {
                // Some servers give other ETags (encryption at rest): compare the bytes.
                for i in 0..parts {
                    let at = i * PART_BYTES;
                    let got = self.get_range(key, at..(at + PART_BYTES).min(len))?;
                    if got.as_ref() != read_part(i)?.as_slice() {
                        return Err(conflict(size, etag));
                    }
                }
                Ok(etag)
            }
            Some((size, etag)) => Err(conflict(size, etag)),
            None => Err(TierError::Verify {
                url: self.url.clone(),
                key: key.to_string(),
                detail: "the object is not there after the upload".into(),
            }),
        }
    }
}

/// `prefix/name`, or `name` without a prefix: never a leading "/".
pub(crate) fn key_of(prefix: &str, name: &str) -> String {
    let prefix = prefix.trim_matches('/');
    let name = name.trim_start_matches('/');
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pacer_spaces_uploads_by_their_bits_over_the_rate() {
        // 8 Mbit/s: a megabyte is a second on the line.
        let p = Pacer::new(8_000_000);
        let t0 = Instant::now();
        assert_eq!(p.reserve(1_000_000, t0), t0, "the first goes at once");
        let second = p.reserve(500_000, t0);
        assert_eq!(second - t0, Duration::from_secs(1));
        let third = p.reserve(1, t0 + Duration::from_millis(100));
        assert_eq!(third - t0, Duration::from_millis(1500));
        // After a pause longer than the reservations, the next goes at once again.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(p.reserve(1_000_000, later), later);
    }

    #[test]
    fn keys_never_start_with_a_slash() {
        assert_eq!(key_of("", "segments/seg-1"), "segments/seg-1");
        assert_eq!(key_of("/a/b/", "/segments/seg-1"), "a/b/segments/seg-1");
        assert_eq!(key_of("a", "x"), "a/x");
    }

    #[test]
    fn the_etag_is_the_md5_for_one_part_and_the_md5_of_md5s_for_several() {
        let m = |b: &[u8]| -> [u8; 16] { Md5::digest(b).into() };
        assert_eq!(expected_etag(&[m(b"")]), "d41d8cd98f00b204e9800998ecf8427e");
        let two = expected_etag(&[m(b"a"), m(b"b")]);
        assert!(two.ends_with("-2") && two.len() == 34, "{two}");
    }

    #[test]
    fn a_credentials_file_needs_two_lines_and_the_error_names_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cred");
        std::fs::write(&p, "id\n\nsecret\n").unwrap();
        assert_eq!(credentials(&p).unwrap(), ("id".into(), "secret".into()));
        std::fs::write(&p, "only-one\n").unwrap();
        let e = credentials(&p).unwrap_err().to_string();
        assert!(
            e.contains("credentials_file") && e.contains("cred") && e.contains("found 1"),
            "{e}"
        );
    }
}
