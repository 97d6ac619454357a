//! The NVMe/TCP transport against the in-test controller (`mini_target`):
//! bring-up over fabrics, in-capsule and R2T writes, C2H reads, digests,
//! and faults: short reads, a bad data digest, a connection closed under
//! outstanding I/O, and a reset that connects again.

// Test code (and its helper module): a failed unwrap is a failed test,
// and the test sizes fit every integer type they are cast to.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod mini_target;

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::mini_target::{MiniTarget, BLOCK, NQN};
    use bdevkit_nvme_driver::tcp::TcpQueue;
    use bdevkit_nvme_driver::{
        Completion, Controller, ControllerOptions, Data, Dir, Qpair, QueueTransport, Request,
        TcpOptions, TcpTransport,
    };
    use bdevkit_nvme_spec::io::{BlockRange, Read, Write};
    use bdevkit_nvme_spec::tcp::Digests;
    use bdevkit_nvme_spec::{Command, Status};

    /// A request over one owned buffer.
    #[derive(Debug)]
    struct Buf(Vec<u8>);

    // SAFETY: the buffer is the request's own `Vec`, kept (not resized) for
    // as long as the queue pair holds the request; the tests look at it
    // only once it came back.
    unsafe impl Request for Buf {
        fn segment_count(&self, _d: Data) -> usize {
            1
        }
        fn segment(&self, _d: Data, _i: usize) -> (usize, usize) {
            (self.0.as_ptr() as usize, self.0.len())
        }
        fn for_each_segment(&self, _d: Data, f: &mut dyn FnMut(&[u8])) {
            f(&self.0);
        }
        fn for_each_segment_mut(&mut self, _d: Data, f: &mut dyn FnMut(&mut [u8])) -> bool {
            f(&mut self.0);
            true
        }
    }

    type Qp = Qpair<TcpQueue, Buf>;

    fn attach(t: &MiniTarget, digests: bool) -> Arc<Controller<TcpTransport>> {
        let mut o = TcpOptions::new("127.0.0.1", &t.port(), NQN);
        o.digests = Digests {
            header: digests,
            data: digests,
        };
        // The controller may send its PDUs a few bytes at a time, one
        // write and yield each (short_reads_and_writes): on a loaded
        // machine an Identify takes seconds that way. The tests check what
        // arrives, not how fast: a hang still fails, after 2 minutes.
        let opts = ControllerOptions {
            num_io_queues: 4,
            admin_timeout: Duration::from_secs(120),
            ..ControllerOptions::default()
        };
        Controller::attach(TcpTransport::new(o).unwrap(), opts).unwrap()
    }

    /// Polls until `n` commands completed; a hang fails the test.
    fn wait(qp: &mut Qp, n: usize) -> Vec<Completion<Buf>> {
        let mut all = Vec::new();
        let mut batch = Vec::with_capacity(64);
        let deadline = Instant::now() + Duration::from_secs(120);
        while all.len() < n {
            qp.flush();
            qp.process(&mut batch);
            all.append(&mut batch);
            assert!(Instant::now() < deadline, "commands never completed");
            std::thread::sleep(Duration::from_micros(50));
        }
        all
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn write(qp: &mut Qp, lba: u64, data: Vec<u8>) -> Status {
        let n = (data.len() / BLOCK) as u32;
        let sqe = Write::new(1, BlockRange::new(lba, n).unwrap()).to_sqe(0);
        qp.submit(sqe, Data::Main, Dir::ToDevice, Buf(data))
            .map_err(|(_, e)| e)
            .unwrap();
        wait(qp, 1).remove(0).status()
    }

    fn read(qp: &mut Qp, lba: u64, len: usize) -> (Status, Vec<u8>) {
        let n = (len / BLOCK) as u32;
        let sqe = Read::new(1, BlockRange::new(lba, n).unwrap()).to_sqe(0);
        qp.submit(sqe, Data::Main, Dir::FromDevice, Buf(vec![0; len]))
            .map_err(|(_, e)| e)
            .unwrap();
        let c = wait(qp, 1).remove(0);
        (c.status(), c.ctx.0)
    }

    /// Writes in the capsule and through R2T (several H2CData PDUs), reads
    /// them back, and checks the controller's memory.
    fn round_trip(t: &MiniTarget, qp: &mut Qp) {
        for (lba, len, seed) in [
            (0u64, 512usize, 1u8),
            (8, 4096, 2),
            (64, 65536, 3),
            (300, 131072, 4),
        ] {
            let data = pattern(len, seed);
            assert!(write(qp, lba, data.clone()).is_success(), "write {len}");
            let (st, got) = read(qp, lba, len);
            assert!(st.is_success(), "read {len}: {st}");
            assert_eq!(got, data, "read back {len} bytes at {lba}");
            let off = lba as usize * BLOCK;
            assert_eq!(&t.state.ram.lock().unwrap()[off..off + len], &data[..]);
        }
    }

    #[test]
    fn bring_up_and_data_without_digests() {
        let t = MiniTarget::start();
        let c = attach(&t, false);
        assert_eq!(c.identify().subnqn(), NQN);
        assert_eq!(c.namespaces().len(), 1);
        assert_eq!(c.namespaces()[0].block_size, 512);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        round_trip(&t, &mut qp);
        c.delete_io_qpair(qp);
        c.shutdown().unwrap();
    }

    #[test]
    fn data_with_digests_and_queue_depth() {
        let t = MiniTarget::start();
        let c = attach(&t, true);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        round_trip(&t, &mut qp);
        // Negotiated by the ICResp, which the queue's polls received.
        assert_eq!(
            qp.transport().digests(),
            Digests {
                header: true,
                data: true
            }
        );
        // Many commands in flight at once, mixed sizes.
        for i in 0..32u64 {
            let len = if i % 2 == 0 { 4096 } else { 16384 };
            let sqe =
                Write::new(1, BlockRange::new(i * 32, (len / BLOCK) as u32).unwrap()).to_sqe(0);
            qp.submit(sqe, Data::Main, Dir::ToDevice, Buf(pattern(len, i as u8)))
                .map_err(|(_, e)| e)
                .unwrap();
        }
        for c in wait(&mut qp, 32) {
            assert!(c.status().is_success(), "{}", c.status());
        }
        for i in 0..32u64 {
            let len = if i % 2 == 0 { 4096 } else { 16384 };
            assert_eq!(read(&mut qp, i * 32, len).1, pattern(len, i as u8));
        }
        c.delete_io_qpair(qp);
        c.shutdown().unwrap();
    }

    #[test]
    fn short_reads_and_writes() {
        let t = MiniTarget::start();
        // Every PDU from the controller arrives a few bytes at a time.
        t.state.faults.chunk.store(3, Ordering::Relaxed);
        let c = attach(&t, true);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        round_trip(&t, &mut qp);
        // Other cuts: single bytes, odd sizes across header/data/digest.
        for chunk in [1usize, 7, 25, 4099] {
            t.state.faults.chunk.store(chunk, Ordering::Relaxed);
            let len = if chunk == 1 { 1024 } else { 32768 };
            let data = pattern(len, chunk as u8);
            assert!(write(&mut qp, 2048, data.clone()).is_success());
            let (st, got) = read(&mut qp, 2048, len);
            assert!(st.is_success(), "chunk {chunk}: {st}");
            assert_eq!(got, data, "chunk {chunk}");
        }
        t.state.faults.chunk.store(0, Ordering::Relaxed);
        // A 1 MiB write outruns the socket's send buffer: partial sends.
        let data = pattern(1 << 20, 9);
        let mut o = TcpOptions::new("127.0.0.1", &t.port(), NQN);
        o.max_data_bytes = 1 << 20;
        let big = Controller::attach(TcpTransport::new(o).unwrap(), ControllerOptions::default())
            .unwrap();
        let mut qp2: Qp = big.create_io_qpair().unwrap();
        assert!(write(&mut qp2, 1024, data.clone()).is_success());
        assert_eq!(read(&mut qp2, 1024, 1 << 20).1, data);
        big.delete_io_qpair(qp2);
        c.delete_io_qpair(qp);
    }

    #[test]
    fn bad_data_digest_fails_that_command_only() {
        let t = MiniTarget::start();
        let c = attach(&t, true);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        let data = pattern(8192, 5);
        assert!(write(&mut qp, 16, data.clone()).is_success());
        t.state.faults.bad_digest.store(true, Ordering::Relaxed);
        let (st, _) = read(&mut qp, 16, 8192);
        assert!(st.is(Status::TRANSIENT_TRANSPORT_ERROR), "status {st}");
        assert!(!st.dnr, "a digest error may be retried");
        assert!(qp.transport().is_alive());
        let (st, got) = read(&mut qp, 16, 8192);
        assert!(st.is_success());
        assert_eq!(got, data);
        c.delete_io_qpair(qp);
    }

    #[test]
    fn closed_connection_fails_outstanding_io_then_reset_reconnects() {
        let t = MiniTarget::start();
        let c = attach(&t, false);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        let data = pattern(4096, 7);
        assert!(write(&mut qp, 0, data.clone()).is_success());
        t.state.faults.hold_io.store(true, Ordering::Relaxed);
        for i in 0..8u64 {
            let sqe = Read::new(1, BlockRange::new(i * 8, 8).unwrap()).to_sqe(0);
            qp.submit(sqe, Data::Main, Dir::FromDevice, Buf(vec![0; 4096]))
                .map_err(|(_, e)| e)
                .unwrap();
        }
        qp.flush();
        // The controller drops the connection with all eight outstanding.
        t.state.faults.close_io.store(true, Ordering::Relaxed);
        let done = wait(&mut qp, 8);
        assert!(done
            .iter()
            .all(|c| c.status().is(Status::TRANSIENT_TRANSPORT_ERROR)));
        assert!(!qp.transport().is_alive());
        assert!(qp.transport().dead_reason().is_some());
        assert_eq!(qp.outstanding(), 0);
        // New commands are refused until the queue connects again.
        let sqe = Read::new(1, BlockRange::new(0, 8).unwrap()).to_sqe(0);
        assert!(qp
            .submit(sqe, Data::Main, Dir::FromDevice, Buf(vec![0; 4096]))
            .is_err());

        // A reset: a new association, and the queue connects again.
        assert!(!t.state.faults.hold_io.load(Ordering::Relaxed));
        c.disable().unwrap();
        c.enable().unwrap();
        c.reconnect_io_qpair(&mut qp).unwrap();
        assert!(qp.transport().is_alive());
        assert_eq!(read(&mut qp, 0, 4096).1, data);
        c.delete_io_qpair(qp);
    }

    #[test]
    fn keep_alive_from_the_admin_poller() {
        let t = MiniTarget::start();
        let mut o = TcpOptions::new("127.0.0.1", &t.port(), NQN);
        o.keep_alive_timeout_ms = 200;
        let opts = ControllerOptions {
            keep_alive_timeout_ms: 200,
            ..ControllerOptions::default()
        };
        let c = Controller::attach(TcpTransport::new(o).unwrap(), opts).unwrap();
        // Polled as the adapter's admin poller does: Keep Alive at KATO/2.
        let deadline = Instant::now() + Duration::from_secs(60);
        while t.state.keep_alives.load(Ordering::Acquire) < 2 {
            assert_eq!(c.poll_admin(), bdevkit_nvme_driver::Health::Ok);
            assert!(Instant::now() < deadline, "no keep alive");
            std::thread::sleep(Duration::from_millis(5));
        }
        c.shutdown().unwrap();
        // After shutdown the admin connection is gone: health says so.
        assert_eq!(c.health(), bdevkit_nvme_driver::Health::Fatal);
    }

    #[test]
    fn read_data_missing_fails_that_command_only() {
        let t = MiniTarget::start();
        let c = attach(&t, false);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        let data = pattern(8192, 6);
        assert!(write(&mut qp, 32, data.clone()).is_success());
        t.state.faults.short_read.store(true, Ordering::Relaxed);
        let (st, _) = read(&mut qp, 32, 8192);
        assert!(st.is(Status::DATA_TRANSFER_ERROR), "status {st}");
        assert!(qp.transport().is_alive());
        assert_eq!(read(&mut qp, 32, 8192).1, data);
        c.delete_io_qpair(qp);
    }

    /// Outstanding reads behind a PDU that breaks the protocol: every one
    /// fails (retryable), the queue is dead with the reason, nothing hangs.
    fn protocol_error(t: &MiniTarget, arm: impl FnOnce(), why: &str) {
        let c = attach(t, true);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        arm();
        for i in 0..4u64 {
            let sqe = Read::new(1, BlockRange::new(i * 8, 8).unwrap()).to_sqe(0);
            qp.submit(sqe, Data::Main, Dir::FromDevice, Buf(vec![0; 4096]))
                .map_err(|(_, e)| e)
                .unwrap();
        }
        let done = wait(&mut qp, 4);
        assert!(done.iter().any(|c| !c.status().is_success()), "{why}");
        assert!(done
            .iter()
            .all(|c| c.status().is_success() || c.status().is(Status::TRANSIENT_TRANSPORT_ERROR)));
        assert!(!qp.transport().is_alive(), "{why}");
        let reason = qp.transport().dead_reason().unwrap().to_string();
        assert!(reason.contains("protocol error"), "{why}: {reason}");
        // The controller was told why (H2CTermReq) before the close.
        let deadline = Instant::now() + Duration::from_secs(60);
        while t.state.term_reqs.load(Ordering::Acquire) == 0 {
            assert!(Instant::now() < deadline, "{why}: no H2CTermReq");
            std::thread::sleep(Duration::from_millis(1));
        }
        c.delete_io_qpair(qp);
    }

    #[test]
    fn bad_header_digest_is_fatal() {
        let t = MiniTarget::start();
        let f = &t.state.faults;
        protocol_error(
            &t,
            || f.bad_header_digest.store(true, Ordering::Relaxed),
            "header digest",
        );
    }

    #[test]
    fn response_for_an_unknown_command_is_fatal() {
        let t = MiniTarget::start();
        let f = &t.state.faults;
        protocol_error(
            &t,
            || f.bogus_cid.store(true, Ordering::Relaxed),
            "bogus cid",
        );
    }

    #[test]
    fn refused_connection_and_bad_arguments() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port().to_string();
        drop(l);
        let t = TcpTransport::new(TcpOptions::new("127.0.0.1", &port, NQN)).unwrap();
        let e = Controller::attach(t, ControllerOptions::default()).unwrap_err();
        assert_eq!(e.errno(), libc::ECONNREFUSED, "{e}");
        assert!(TcpTransport::new(TcpOptions::new("127.0.0.1", "x", NQN)).is_err());
        assert!(TcpTransport::new(TcpOptions::new("127.0.0.1", "4420", "not an nqn")).is_err());
    }

    /// Polls `qp` until `f` holds; a hang fails the test.
    fn poll_until(qp: &mut Qp, what: &str, mut f: impl FnMut(&mut Qp) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut batch = Vec::with_capacity(64);
        while !f(qp) {
            qp.flush();
            qp.process(&mut batch);
            assert!(batch.is_empty(), "{what}: a command completed");
            assert!(Instant::now() < deadline, "{what}: never happened");
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    #[test]
    fn io_queue_connects_from_its_polls_and_holds_io_meanwhile() {
        let t = MiniTarget::start();
        let c = attach(&t, true);
        let f = &t.state.faults;
        // A controller that does not answer the ICReq yet: making the
        // queue pair does not wait for it (it used to, up to the connect
        // timeout, then failed).
        f.hold_icresp.store(true, Ordering::Release);
        let ic_before = t.state.ic_reqs.load(Ordering::Acquire);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        assert!(qp.transport().is_connecting());
        assert!(qp.transport().is_alive());
        // I/O submitted now waits in the queue: in the capsule and by R2T.
        let small = pattern(4096, 21);
        let big = pattern(65536, 22);
        for (lba, data) in [(0u64, small.clone()), (16, big.clone())] {
            let n = (data.len() / BLOCK) as u32;
            let sqe = Write::new(1, BlockRange::new(lba, n).unwrap()).to_sqe(0);
            qp.submit(sqe, Data::Main, Dir::ToDevice, Buf(data))
                .map_err(|(_, e)| e)
                .unwrap();
        }
        // The ICReq went out from the polls; nothing completes and no
        // command reaches the controller while it does not answer.
        poll_until(&mut qp, "ICReq", |_| {
            t.state.ic_reqs.load(Ordering::Acquire) > ic_before
        });
        for _ in 0..100 {
            poll_until(&mut qp, "poll", |_| true);
        }
        assert!(qp.transport().is_connecting());
        assert_eq!(t.state.io_cmds.load(Ordering::Acquire), 0);
        assert_eq!(qp.outstanding(), 2);
        // The controller answers: Connect, then the held writes go out.
        f.hold_icresp.store(false, Ordering::Release);
        for c in wait(&mut qp, 2) {
            assert!(c.status().is_success(), "{}", c.status());
        }
        assert!(!qp.transport().is_connecting());
        assert_eq!(read(&mut qp, 0, 4096).1, small);
        assert_eq!(read(&mut qp, 16, 65536).1, big);
        assert_eq!(&t.state.ram.lock().unwrap()[..4096], &small[..]);
        c.delete_io_qpair(qp);
        c.shutdown().unwrap();
    }

    /// Held I/O fails with Transient Transport Error and the queue is
    /// dead, as for a dropped connection.
    fn held_io_fails(qp: &mut Qp) {
        let sqe = Read::new(1, BlockRange::new(0, 8).unwrap()).to_sqe(0);
        qp.submit(sqe, Data::Main, Dir::FromDevice, Buf(vec![0; 4096]))
            .map_err(|(_, e)| e)
            .unwrap();
        let done = wait(qp, 1);
        assert!(
            done[0].status().is(Status::TRANSIENT_TRANSPORT_ERROR),
            "{}",
            done[0].status()
        );
        assert!(!qp.transport().is_alive());
        assert!(!qp.transport().is_connecting());
        assert_eq!(qp.outstanding(), 0);
    }

    #[test]
    fn io_queue_connect_failures_fail_held_io() {
        let t = MiniTarget::start();
        let mut o = TcpOptions::new("127.0.0.1", &t.port(), NQN);
        // Long enough for a loaded machine to connect, short enough for
        // the case below that waits for it to fire.
        o.connect_timeout = Duration::from_secs(5);
        let opts = ControllerOptions {
            num_io_queues: 4,
            ..ControllerOptions::default()
        };
        let c = Controller::attach(TcpTransport::new(o).unwrap(), opts).unwrap();
        let f = &t.state.faults;

        // The controller closes the connection before the ICResp.
        f.down.store(true, Ordering::Release);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        held_io_fails(&mut qp);
        assert!(qp.transport().dead_reason().is_some());
        f.down.store(false, Ordering::Release);
        c.delete_io_qpair(qp);

        // The controller rejects the Fabrics Connect.
        f.reject_io_connect.store(true, Ordering::Release);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        held_io_fails(&mut qp);
        let why = qp.transport().dead_reason().unwrap().to_string();
        assert!(why.contains("Connect rejected"), "{why}");
        c.delete_io_qpair(qp);

        // The controller never answers the ICReq: the connect timeout.
        f.hold_icresp.store(true, Ordering::Release);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        held_io_fails(&mut qp);
        let why = qp.transport().dead_reason().unwrap().to_string();
        assert!(why.contains("timed out"), "{why}");
        f.hold_icresp.store(false, Ordering::Release);

        // A reset connects it again, and I/O goes on.
        c.disable().unwrap();
        c.enable().unwrap();
        c.reconnect_io_qpair(&mut qp).unwrap();
        let data = pattern(4096, 23);
        assert!(write(&mut qp, 8, data.clone()).is_success());
        assert_eq!(read(&mut qp, 8, 4096).1, data);
        c.delete_io_qpair(qp);
    }

    #[test]
    fn r2t_for_in_capsule_data_is_fatal() {
        let t = MiniTarget::start();
        let c = attach(&t, false);
        let mut qp: Qp = c.create_io_qpair().unwrap();
        assert!(write(&mut qp, 0, pattern(4096, 41)).is_success());
        // The controller asks again, by R2T, for data it got in the
        // capsule: a protocol error (the host has no copy to send).
        t.state.faults.r2t_in_capsule.store(true, Ordering::Relaxed);
        let st = write(&mut qp, 8, pattern(4096, 42));
        assert!(st.is(Status::TRANSIENT_TRANSPORT_ERROR), "{st}");
        assert!(!qp.transport().is_alive());
        let reason = qp.transport().dead_reason().unwrap().to_string();
        assert!(reason.contains("protocol error"), "{reason}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while t.state.term_reqs.load(Ordering::Acquire) == 0 {
            assert!(Instant::now() < deadline, "no H2CTermReq");
            std::thread::sleep(Duration::from_millis(1));
        }
        c.delete_io_qpair(qp);
    }
}
