//! A ClickHouse server of a test's own (Debian's `clickhouse-server`, 18.16 here) on
//! loopback ports of its own, with its data in a temporary directory; stopped by PID when
//! dropped. Used by tests/fleet.rs and tests/tier.rs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::need_tool;

/// A ClickHouse server of the test's own, stopped (by PID) when dropped.
pub struct ClickHouse {
    pub dir: PathBuf,
    pub http: u16,
    pub child: Option<Child>,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl ClickHouse {
    /// Starts a server whose data lives in `dir`.
    pub fn start(dir: &Path) -> ClickHouse {
        let (http, tcp, inter) = (free_port(), free_port(), free_port());
        let mut c = ClickHouse {
            dir: dir.to_path_buf(),
            http,
            child: None,
        };
        std::fs::create_dir_all(dir).unwrap();
        let d = dir.display();
        std::fs::write(
            dir.join("users.xml"),
            "<yandex><profiles><default></default></profiles><users><default><password>\
             </password><networks><ip>127.0.0.1</ip></networks><profile>default</profile>\
             <quota>default</quota></default></users><quotas><default></default></quotas>\
             </yandex>\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("config.xml"),
            format!(
                "<yandex><logger><level>warning</level><log>{d}/log.txt</log>\
                 <errorlog>{d}/err.txt</errorlog><console>0</console></logger>\
                 <http_port>{http}</http_port><tcp_port>{tcp}</tcp_port>\
                 <interserver_http_port>{inter}</interserver_http_port>\
                 <listen_host>127.0.0.1</listen_host><path>{d}/data/</path>\
                 <tmp_path>{d}/tmp/</tmp_path><user_files_path>{d}/user_files/</user_files_path>\
                 <format_schema_path>{d}/format_schemas/</format_schema_path>\
                 <users_config>{d}/users.xml</users_config><default_profile>default\
                 </default_profile><default_database>default</default_database>\
                 <mark_cache_size>268435456</mark_cache_size></yandex>\n"
            ),
        )
        .unwrap();
        c.run();
        c
    }

    pub fn run(&mut self) {
        let bin = need_tool("clickhouse-server");
        let child = Command::new(bin)
            .arg(format!(
                "--config-file={}",
                self.dir.join("config.xml").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start clickhouse-server");
        self.child = Some(child);
        let t0 = Instant::now();
        while self.sql("SELECT 1").is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "ClickHouse did not answer on port {} within 60 s: {}",
                self.http,
                std::fs::read_to_string(self.dir.join("err.txt")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http)
    }

    /// Runs `sql` over HTTP (curl); `None` when the server does not answer 200.
    pub fn sql(&self, sql: &str) -> Option<String> {
        let out = Command::new(need_tool("curl"))
            .args(["-sf", "--max-time", "10", "--data-binary", sql, &self.url()])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    pub fn number(&self, sql: &str) -> u64 {
        let s = self
            .sql(sql)
            .unwrap_or_else(|| panic!("ClickHouse refused {sql}"));
        s.parse().unwrap_or_else(|_| panic!("{sql}: {s:?}"))
    }
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        self.stop();
    }
}
