//! The CPU lane of a composed replay ([`crate::replay::replay_composed`]): the expert calls
//! the engine's CPU lane ran in each (step, MoE layer) group ([`ReplayGroup::cpu_calls`]),
//! run for real on the host CPU while the GPU runs the group's own keys.
//!
//! Per group with CPU calls, as the engine's "Cost of a group" orders it:
//! 1. the group's activations (`activation_bytes`, bf16) are copied device to host on the
//!    compute stream right after its router event, into pinned memory, and an event marks
//!    their arrival;
//! 2. at the router, the host thread that issues the VMM calls and launches hands the group
//!    to a worker thread ([`LaneWorker`]) and goes on with the GPU keys' evictions, page-ins
//!    and expert launches; the worker waits for the activations' event, then runs the calls
//!    one after another on the host calibration's rayon pool (`LaneBank::time_step`), as
//!    llama.cpp and ktransformers run their CPU experts beside the GPU's launches;
//! 3. once the GPU keys are launched (and a `misses` group's off-critical-path page-ins
//!    enqueued), the host waits for the worker, copies the CPU results host to device on the
//!    compute stream, and only then enqueues the next group's non-expert kernel.
//!
//! The worker needs no GPU when no event is given (`LaneWorker::start` with `act: None`),
//! so the CPU half runs on CI.

use crate::host::expert_kernel::Format;
use crate::host::lane_replay::{LaneBank, LANE_BANK_BYTES};
use crate::replay::{Pinned, ReplayError};
use crate::replay_plan::{ReplayGroup, ReplayPlan};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr};
use kernels::ExpertGeometry;
use serde::{Deserialize, Serialize};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Instant;

/// What the host CPU runs a composed replay's calls with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuLaneSpec {
    /// One CPU expert's kernel geometry (the trace header's hidden and expert FFN sizes).
    pub geom: ExpertGeometry,
    /// Weight format of the host kernel.
    pub format: Format,
    /// Experts the CPU may call (`LaneCall::expert` runs over `0..experts`): the CPU
    /// layers' keys for `layers:N`, every key for `misses`.
    pub experts: usize,
    /// Host threads of the rayon pool.
    pub threads: usize,
    /// Keep the pool's threads spinning between groups instead of letting them sleep, as
    /// llama.cpp's threadpool polls for work between graph nodes (`--poll`, 50 by default).
    pub poll: bool,
    /// Seed of the bank's random weights (PCG64).
    pub seed: u64,
}

/// What the CPU lane of a composed replay did over the measured steps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuLaneMeasured {
    /// Expert calls the worker ran on the host CPU.
    pub calls: u64,
    /// Groups the worker ran.
    pub groups: u64,
    /// Per measured step, the calls the worker ran.
    pub calls_per_step: Vec<u64>,
    /// Per measured step, µs the worker spent in the calls (host clock, after the
    /// activations arrived).
    pub calls_us: Vec<f64>,
    /// Per measured step, µs the launching host thread waited for the worker once the
    /// GPU part of its groups was enqueued.
    pub join_wait_us: Vec<f64>,
    /// Host threads the calls ran on.
    pub threads: usize,
    /// Whether the threads spun between groups ([`CpuLaneSpec::poll`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub poll: bool,
    /// Bytes of the weights the calls read from (`LaneBank::bank_bytes`), and whether each
    /// CPU expert had its own block (else a bank cycled call by call).
    pub bank_bytes: u64,
    pub distinct_weights: bool,
}

impl CpuLaneMeasured {
    /// Empty totals for `steps` steps.
    pub fn new(steps: usize, threads: usize, poll: bool) -> CpuLaneMeasured {
        CpuLaneMeasured {
            calls_us: vec![0.0; steps],
            join_wait_us: vec![0.0; steps],
            calls_per_step: vec![0; steps],
            threads,
            poll,
            ..CpuLaneMeasured::default()
        }
    }

    /// The same, recording the bank the calls read.
    pub fn with_bank(self, bank_bytes: u64, distinct_weights: bool) -> CpuLaneMeasured {
        CpuLaneMeasured {
            bank_bytes,
            distinct_weights,
            ..self
        }
    }

    /// Group `g`'s calls ran: `n` of them in `us` µs, the launching thread waited `wait` µs.
    fn add(&mut self, g: &ReplayGroup, n: usize, us: f64, wait: f64) {
        let s = g.step as usize;
        self.calls_us[s] += us;
        self.join_wait_us[s] += wait;
        self.calls_per_step[s] += n as u64;
        self.calls += n as u64;
        self.groups += 1;
    }

    /// Leave out the warm-up steps of `plan` (their calls and groups too).
    pub fn drop_warm_up(&mut self, plan: &ReplayPlan) {
        let w = plan.warmup_steps.min(self.calls_us.len());
        self.calls_us.drain(..w);
        self.join_wait_us.drain(..w);
        let warm: u64 = self.calls_per_step.drain(..w).sum();
        self.calls -= warm;
        self.groups -= plan
            .groups
            .iter()
            .filter(|g| (g.step as usize) < w && !g.cpu_calls.is_empty())
            .count() as u64;
    }
}

/// Checks of a composed plan against its CPU lane: every call names a CPU expert of the
/// bank, and a group with calls has activations to copy.
pub fn check_plan(plan: &ReplayPlan, spec: &CpuLaneSpec) -> Result<(), String> {
    for (gi, g) in plan.groups.iter().enumerate() {
        if let Some(c) = g
            .cpu_calls
            .iter()
            .find(|c| c.expert as usize >= spec.experts)
        {
            return Err(format!(
                "group {gi} calls CPU expert {} of {}",
                c.expert, spec.experts
            ));
        }
        if !g.cpu_calls.is_empty() && g.activation_bytes == 0 {
            return Err(format!("group {gi} has CPU calls but no activations"));
        }
    }
    Ok(())
}

/// The bank of a composed replay's CPU lane: one block per CPU expert when they fit
/// [`LANE_BANK_BYTES`], else cycled (see `host::lane_replay`). Built once per row and lent
/// to each of its replays (filling 768 MiB with random weights takes seconds).
pub fn lane_bank(spec: &CpuLaneSpec, max_tokens: usize) -> LaneBank {
    LaneBank::new(
        spec.geom,
        spec.format,
        spec.experts,
        LANE_BANK_BYTES,
        max_tokens,
        spec.seed,
    )
}

/// Jobs that keep every thread of a pool spinning until [`Spinners::stop`]: between groups
/// the pool's threads stay awake, as a polling threadpool's do, instead of sleeping and being
/// woken (on a virtual machine, a halted vCPU's wake-up is a hypervisor round trip).
#[derive(Default)]
struct Spinners {
    /// Bumped by every stop; a spinner runs while it reads the value it started under.
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Spinners {
    /// Start one spinner on every thread of `pool`.
    fn start(&self, pool: &rayon::ThreadPool) {
        use std::sync::atomic::Ordering;
        let gen = self.generation.clone();
        let mine = gen.load(Ordering::Acquire);
        pool.spawn_broadcast(move |_| {
            while gen.load(Ordering::Acquire) == mine {
                std::hint::spin_loop();
            }
        });
    }

    /// End the spinners started so far (they return at their next check).
    fn stop(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The worker thread of the CPU lane: takes groups in order, waits for their activations,
/// runs their calls, and answers each with the calls' µs.
pub struct LaneWorker<'scope> {
    jobs: Option<Sender<usize>>,
    done: Receiver<(usize, f64)>,
    handle: Option<ScopedJoinHandle<'scope, Result<(), String>>>,
}

impl<'scope> LaneWorker<'scope> {
    /// Start the worker in `s` over `plan`'s groups, reading `bank`, on a pool of `threads`;
    /// before each group's calls it waits for `act` (the activations' arrival on the host),
    /// when given.
    pub fn start<'env>(
        s: &'scope Scope<'scope, 'env>,
        plan: &'env ReplayPlan,
        bank: &'env mut LaneBank,
        threads: usize,
        poll: bool,
        act: Option<&'env CudaEvent>,
    ) -> LaneWorker<'scope> {
        let (jobs, rx) = channel::<usize>();
        let (tx, done) = channel::<(usize, f64)>();
        let handle = s.spawn(move || {
            let pool = crate::host::pool(threads);
            let spin = Spinners::default();
            for gi in rx {
                if poll {
                    spin.stop();
                }
                if let Some(e) = act {
                    e.synchronize()
                        .map_err(|e| format!("waiting for group {gi}'s activations: {e}"))?;
                }
                let calls = &plan.groups[gi].cpu_calls;
                let us = bank.time_step(calls, &pool);
                if poll {
                    spin.start(&pool);
                }
                if tx.send((calls.len(), us)).is_err() {
                    break;
                }
            }
            spin.stop();
            Ok(())
        });
        LaneWorker {
            jobs: Some(jobs),
            done,
            handle: Some(handle),
        }
    }

    /// Hand group `gi` to the worker (its calls start once its activations are on the host).
    pub fn submit(&mut self, gi: usize) -> Result<(), String> {
        let sent = self.jobs.as_ref().map(|j| j.send(gi).is_ok());
        if sent != Some(true) {
            return Err(self.failure());
        }
        Ok(())
    }

    /// Wait for the group handed over last; returns how many calls it ran, their µs and
    /// the µs this thread waited.
    pub fn join(&mut self) -> Result<(usize, f64, f64), String> {
        let t = Instant::now();
        let (n, us) = self.done.recv().map_err(|_| self.failure())?;
        Ok((n, us, t.elapsed().as_secs_f64() * 1e6))
    }

    /// Why the worker stopped (its error, or that it panicked).
    fn failure(&mut self) -> String {
        self.jobs = None;
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(Err(e))) => format!("the CPU lane's worker stopped: {e}"),
            Some(Err(_)) => "the CPU lane's worker panicked".into(),
            _ => "the CPU lane's worker stopped".into(),
        }
    }

    /// Stop the worker (after every group was joined) and report its error, if any.
    pub fn finish(mut self) -> Result<(), String> {
        self.jobs = None;
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the CPU lane's worker panicked".into()),
            None => Ok(()),
        }
    }
}

/// The device and pinned host buffers of the activations' copies, and the event marking a
/// group's activations on the host.
pub struct LaneIo {
    /// The device buffer (kept alive) and its address, read once outside the timed loop.
    _device: CudaSlice<u8>,
    device_ptr: u64,
    to_host: Pinned,
    from_host: Pinned,
    max_bytes: u64,
    /// Recorded on the compute stream after a group's device-to-host copy.
    pub arrived: CudaEvent,
}

fn driver(what: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> ReplayError {
    move |source| ReplayError::Driver { step: what, source }
}

impl LaneIo {
    /// Buffers of the plan's largest activations.
    pub fn new(
        ctx: &Arc<CudaContext>,
        compute: &Arc<CudaStream>,
        plan: &ReplayPlan,
    ) -> Result<LaneIo, ReplayError> {
        let max_bytes = plan
            .groups
            .iter()
            .map(|g| g.activation_bytes)
            .max()
            .unwrap_or(0);
        let n = max_bytes.max(16) as usize;
        let device = compute
            .alloc_zeros::<u8>(n)
            .map_err(driver("activation buffer"))?;
        let device_ptr = {
            let (p, _g) = device.device_ptr(compute);
            p
        };
        compute.synchronize().map_err(driver("activation buffer"))?;
        Ok(LaneIo {
            _device: device,
            device_ptr,
            to_host: Pinned::new(n)?,
            from_host: Pinned::new(n)?,
            max_bytes,
            arrived: ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("event create"))?,
        })
    }

    /// `bytes` of activations device to host on `compute`, then the arrival event.
    pub fn to_host(&self, compute: &Arc<CudaStream>, bytes: u64) -> Result<(), ReplayError> {
        let n = bytes.min(self.max_bytes) as usize;
        // SAFETY: both buffers hold at least max_bytes; the copy is ordered on `compute`.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                self.to_host.ptr as *mut _,
                self.device_ptr,
                n,
                compute.cu_stream(),
            )
        }
        .result()
        .map_err(driver("cuMemcpyDtoHAsync (activations to the CPU)"))?;
        self.arrived.record(compute).map_err(driver("event record"))
    }

    /// `bytes` of CPU results host to device on `compute`, before the next group's kernels.
    pub fn to_device(&self, compute: &Arc<CudaStream>, bytes: u64) -> Result<(), ReplayError> {
        let n = bytes.min(self.max_bytes) as usize;
        // SAFETY: as in `to_host`.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                self.device_ptr,
                self.from_host.ptr as *const _,
                n,
                compute.cu_stream(),
            )
        }
        .result()
        .map_err(driver("cuMemcpyHtoDAsync (CPU results to the GPU)"))
    }
}

/// The CPU lane of a running composed replay: its worker and what it measured so far.
pub struct LaneRun<'scope> {
    pub worker: LaneWorker<'scope>,
    pub measured: CpuLaneMeasured,
}

impl LaneRun<'_> {
    /// Hand group `gi` to the worker.
    pub fn submit(&mut self, gi: usize) -> Result<(), ReplayError> {
        self.worker.submit(gi).map_err(ReplayError::Invalid)
    }

    /// Wait for group `g`'s calls, then copy their results to the GPU on the compute stream
    /// of `copy_back` (none in the CPU half's dry run).
    pub fn join(
        &mut self,
        g: &ReplayGroup,
        copy_back: Option<(&Arc<CudaStream>, &LaneIo)>,
    ) -> Result<(), ReplayError> {
        let (n, us, wait) = self.worker.join().map_err(ReplayError::Invalid)?;
        self.measured.add(g, n, us, wait);
        match copy_back {
            Some((compute, io)) => io.to_device(compute, g.activation_bytes),
            None => Ok(()),
        }
    }

    /// Stop the worker; what it measured.
    pub fn finish(self) -> Result<CpuLaneMeasured, ReplayError> {
        self.worker.finish().map_err(ReplayError::Invalid)?;
        Ok(self.measured)
    }
}

/// The CPU half of a composed plan without a GPU: every group's calls handed to a
/// [`LaneWorker`] and joined in order, as the composed replay does between a group's router
/// and its next group's launch. Returns the calls per step and the µs of each step's calls.
/// (The dry run of the CPU lane on a machine without a GPU.)
pub fn run_cpu_half(plan: &ReplayPlan, spec: &CpuLaneSpec) -> Result<CpuLaneMeasured, String> {
    check_plan(plan, spec)?;
    let mut bank = lane_bank(spec, 1);
    let measured = CpuLaneMeasured::new(plan.steps, spec.threads, spec.poll)
        .with_bank(bank.bank_bytes() as u64, bank.distinct);
    let mut m = std::thread::scope(|s| {
        let mut run = LaneRun {
            worker: LaneWorker::start(s, plan, &mut bank, spec.threads, spec.poll, None),
            measured,
        };
        for (gi, g) in plan.groups.iter().enumerate() {
            if !g.cpu_calls.is_empty() {
                run.submit(gi)?;
                run.join(g, None)?;
            }
        }
        run.finish()
    })
    .map_err(|e| e.to_string())?;
    m.drop_warm_up(plan);
    Ok(m)
}

/// Calls per step of `plan` (warm-up included): what a replay's CPU lane must run.
pub fn calls_per_step(plan: &ReplayPlan) -> Vec<u64> {
    let mut out = vec![0u64; plan.steps];
    for g in &plan.groups {
        out[g.step as usize] += g.cpu_calls.len() as u64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::lane_replay::LaneCall;
    use crate::replay_plan::ReplayGroup;
    use policies::Paging;

    fn call(expert: u32, tokens: u32) -> LaneCall {
        LaneCall { expert, tokens }
    }

    fn plan() -> ReplayPlan {
        let g = |step, layer, calls: Vec<LaneCall>| ReplayGroup {
            step,
            moe_layer: layer,
            activation_bytes: if calls.is_empty() { 0 } else { 256 },
            cpu_calls: calls,
            ..ReplayGroup::default()
        };
        ReplayPlan {
            paging: Paging::Vmm,
            groups: vec![
                g(0, 0, vec![call(0, 1), call(3, 1)]),
                g(0, 1, vec![]),
                g(1, 0, vec![call(1, 1)]),
                g(1, 1, vec![call(2, 1), call(0, 1), call(1, 1)]),
            ],
            preloaded: vec![],
            steps: 2,
            warmup_steps: 1,
            moe_layers: 2,
            hidden: 128,
            nonexpert_bytes_per_layer: 0,
        }
    }

    fn spec(experts: usize) -> CpuLaneSpec {
        CpuLaneSpec {
            geom: ExpertGeometry::new(128, 128, 128).unwrap(),
            format: Format::Int4,
            experts,
            threads: 1,
            poll: false,
            seed: 3,
        }
    }

    #[test]
    fn the_cpu_half_runs_every_measured_call_and_times_it() {
        let p = plan();
        assert_eq!(calls_per_step(&p), vec![2, 4]);
        let m = run_cpu_half(&p, &spec(4)).unwrap();
        // the warm-up step (2 calls, 1 group) is left out: 4 calls in 2 groups remain
        assert_eq!((m.calls, m.groups), (4, 2));
        assert_eq!(m.calls_per_step, vec![4]);
        assert_eq!(m.calls_us.len(), 1);
        assert!(m.calls_us[0] > 0.0 && m.join_wait_us[0] >= 0.0);
    }

    /// With polling, two threads spin between groups and stop at the end: the same calls
    /// run, and the run returns (a spinner left running would hang the pool's drop).
    #[test]
    fn a_polling_pool_runs_the_same_calls_and_stops_spinning() {
        let spec = CpuLaneSpec {
            threads: 2,
            poll: true,
            ..spec(4)
        };
        let m = run_cpu_half(&plan(), &spec).unwrap();
        assert_eq!((m.calls, m.groups, m.poll), (4, 2, true));
        assert_eq!(m.calls_per_step, vec![4]);
    }

    #[test]
    fn a_call_outside_the_bank_or_without_activations_is_refused() {
        let e = run_cpu_half(&plan(), &spec(3)).unwrap_err();
        assert!(e.contains("group 0 calls CPU expert 3 of 3"), "{e}");
        let mut p = plan();
        p.groups[2].activation_bytes = 0;
        let e = check_plan(&p, &spec(4)).unwrap_err();
        assert!(
            e.contains("group 2 has CPU calls but no activations"),
            "{e}"
        );
    }
}
