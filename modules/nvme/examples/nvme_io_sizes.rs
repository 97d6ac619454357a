//! `nvme_io_sizes TRADDR [FIRST_LBA]`: attaches the NVMe controller at
//! `TRADDR` (a PCI address bound to vfio-pci, or `emu` for an emulated
//! one) with the nvme module and runs `bdevkit_test::sizes::roundtrip` on
//! its namespace 1: 512 B … 1 MiB written from aligned, unaligned and
//! multi-segment buffers, read back into unaligned ones and compared.
//! Prints a line per size; exit status 1 on a mismatch or failed I/O.
//! The VM lane runs it against QEMU's controller (test/vm/nvme_vfio.sh).

use std::process::ExitCode;

use bdevkit_nvme::AttachArgs;
use bdevkit_test::TestEnv;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let Some(traddr) = args.get(1).cloned() else {
        eprintln!("usage: nvme_io_sizes TRADDR|emu [FIRST_LBA]");
        return ExitCode::from(2);
    };
    let first_lba: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
    let env = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
    let r: Result<Vec<String>, String> = env.run(move |mgr| async move {
        let traddr = if traddr == "emu" {
            let mut o = bdevkit_nvme_driver::emu::EmuOptions::default();
            o.namespaces[0].num_blocks = 32768;
            bdevkit_nvme::emu_start(&mgr, "emu", o).map_err(|e| e.to_string())?;
            "emu:emu".to_string()
        } else {
            traddr
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let args = AttachArgs::pcie("Nvme0", traddr);
        bdevkit_nvme::attach(
            &mgr,
            args,
            Box::new(move |r| {
                let _ = tx.send(r.map_err(|e| format!("attach: {e}")));
            }),
        );
        let mut got = None;
        bdevkit_test::env::wait_for(60, || {
            got = rx.try_recv().ok();
            got.is_some()
        })
        .await;
        let names = got.ok_or("attach did not finish")??;
        let bdev = names.first().ok_or("no namespace")?.clone();
        let report = bdevkit_test::sizes::roundtrip(&mgr, &bdev, first_lba).await;
        let (tx, rx) = std::sync::mpsc::channel();
        bdevkit_nvme::detach(
            &mgr,
            "Nvme0",
            Box::new(move |r| {
                let _ = tx.send(r.is_ok());
            }),
        );
        bdevkit_test::env::wait_for(60, || rx.try_recv().is_ok()).await;
        report
    });
    match r {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            println!("nvme_io_sizes: all sizes verified");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvme_io_sizes: {e}");
            ExitCode::FAILURE
        }
    }
}
