//! The io_uring prototype of issue 28: a kept-alive HTTP/1.1 relay from one listener to one
//! server, on one thread, with two drivers that share the HTTP framing (`framing.rs`):
//! `--io io_uring` (`uring.rs`: one ring, batched submissions, multishot accept, linked
//! send-then-receive) and `--io epoll` (`epoll.rs`: tokio's current-thread reactor). It does only
//! what a relay of small requests must (parse, forward, count the body, keep both connections
//! alive): no rules, no scheduling, no statistics, no 502s, no chunked bodies. So beside tcpvs it
//! bounds from above what the io_uring path could save, and beside its own epoll driver it
//! measures the way the kernel is entered and nothing else. `benches/io-uring-ab.sh` runs it
//! beside tcpvs, HAProxy and nginx; BENCHMARKS.md has the figures and the decision.
//!
//! Usage: relay_proto --io io_uring|epoll --listen 127.0.0.1:PORT --server 127.0.0.1:PORT
//!        [--fixed-files] [--poll-first | --multishot]

mod epoll;
mod framing;
mod multishot;
mod ring;
mod uring;

use clap::{Parser, ValueEnum};
use std::net::{SocketAddr, TcpListener};

#[derive(Clone, Copy, ValueEnum)]
enum Io {
    #[value(name = "io_uring")]
    IoUring,
    Epoll,
}

#[derive(Parser)]
struct Args {
    #[arg(long, value_enum)]
    io: Io,
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long)]
    server: SocketAddr,
    /// io_uring: name sockets by their index in a table of registered files.
    #[arg(long)]
    fixed_files: bool,
    /// io_uring: a receive waits for data before it tries (IORING_RECVSEND_POLL_FIRST).
    #[arg(long)]
    poll_first: bool,
    /// io_uring: one multishot receive per connection into provided buffers (multishot.rs).
    #[arg(long)]
    multishot: bool,
}

fn main() {
    let args = Args::parse();
    // As tcpvs does at start: the soft limit of descriptors up to the hard one (the table of
    // registered files counts against it too).
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, raised);
    let result = TcpListener::bind(args.listen).and_then(|listener| {
        // Accepted sockets inherit TCP_NODELAY from the listener on Linux.
        rustix::net::sockopt::set_tcp_nodelay(&listener, true)?;
        match args.io {
            Io::IoUring if args.multishot => {
                multishot::run(listener, args.server, args.fixed_files)
            }
            Io::IoUring => uring::run(
                listener,
                args.server,
                uring::Options {
                    fixed_files: args.fixed_files,
                    poll_first: args.poll_first,
                },
            ),
            Io::Epoll => epoll::run(listener, args.server),
        }
    });
    if let Err(e) = result {
        eprintln!("relay_proto: {e}");
        std::process::exit(1);
    }
}
