//! The host a validation ran on, as far as the OS tells without extra tools: CPU model and
//! frequency, frequency governor, load average, CPU time counters (steal time), the NUMA node
//! the process ran on; and, read through the CUDA driver, the GPU's PCI address, its NUMA node
//! and its peak clocks. Each field is `None` (absent from the JSON), never 0, when it cannot
//! be read: another OS, a container without `/sys`, a driver without the attribute.
//!
//! Sources (Linux): `/proc/cpuinfo` (`model name`, `cpu MHz`), `/sys/devices/system/cpu/cpu0/
//! cpufreq/scaling_governor`, `/proc/loadavg`, the aggregate `cpu` line of `/proc/stat` (USER_HZ
//! ticks, `proc(5)`), field 39 of `/proc/self/stat` (the CPU last run on) with
//! `/sys/devices/system/node/node*/cpu*`, `/sys/bus/pci/devices/ADDR/numa_node`. The parsers
//! are pure functions over the files' text, tested on CPU.

use cudarc::driver::{sys, CudaContext};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The aggregate CPU time counters of `/proc/stat`, USER_HZ ticks since boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTicks {
    /// Sum of every field of the `cpu` line (user, nice, system, idle, iowait, irq, softirq,
    /// steal; guest time is already inside user and nice and is not added again).
    pub total: u64,
    /// The `steal` field: time a hypervisor ran other guests while this one wanted the CPU.
    pub steal: u64,
}

impl CpuTicks {
    /// Steal time between `self` (earlier) and `later`, percent of all CPU time in between;
    /// `None` when no tick passed or the counters went backwards.
    pub fn steal_pct_until(&self, later: &CpuTicks) -> Option<f64> {
        let total = later.total.checked_sub(self.total)?;
        let steal = later.steal.checked_sub(self.steal)?;
        (total > 0).then(|| 100.0 * steal as f64 / total as f64)
    }
}

/// One reading of the host's state. Every field absent when unreadable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostContext {
    /// `model name` of the first processor in `/proc/cpuinfo`, e.g. `AMD EPYC 9654`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// Mean `cpu MHz` over the processors of `/proc/cpuinfo` at the reading, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_mhz: Option<f64>,
    /// Logical CPUs listed in `/proc/cpuinfo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// cpufreq governor of CPU 0 (`performance`, `powersave`, `schedutil`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governor: Option<String>,
    /// Load averages over 1, 5 and 15 minutes (`/proc/loadavg`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_avg: Option<[f64; 3]>,
    /// CPU time counters at the reading (steal time between two readings:
    /// [`CpuTicks::steal_pct_until`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ticks: Option<CpuTicks>,
    /// Steal time since boot, percent of all CPU time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_pct_since_boot: Option<f64>,
    /// The NUMA node of the CPU this process last ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// NUMA nodes online.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_nodes: Option<u32>,
    /// The GPU side, read through the CUDA driver (absent on a CPU-only reading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuContext>,
}

/// The GPU's place and clocks, through the CUDA driver's attributes (no nvidia-smi).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuContext {
    /// PCI address `DOMAIN:BUS:DEVICE.0`, hexadecimal (CU_DEVICE_ATTRIBUTE_PCI_*).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// NUMA node of that PCI device (`/sys/bus/pci/devices/ADDR/numa_node`; absent when the
    /// kernel reports -1, no affinity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// Peak SM clock, MHz (CU_DEVICE_ATTRIBUTE_CLOCK_RATE). The driver API reports no current
    /// clock; NVML would, and is not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_max_mhz: Option<f64>,
    /// Peak memory clock, MHz (CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_clock_max_mhz: Option<f64>,
    /// NVIDIA kernel module version (`/proc/driver/nvidia/version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}

impl HostContext {
    /// Reads the host's state now (CPU side; `gpu` is left `None`).
    pub fn read() -> HostContext {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let cpuinfo = read("/proc/cpuinfo");
        let cpuinfo = cpuinfo.as_deref().map(parse_cpuinfo);
        let ticks = read("/proc/stat").as_deref().and_then(parse_stat_cpu);
        let zero = CpuTicks { total: 0, steal: 0 };
        HostContext {
            cpu_model: cpuinfo.as_ref().and_then(|c| c.model.clone()),
            cpu_mhz: cpuinfo.as_ref().and_then(|c| c.mean_mhz),
            cpus: cpuinfo.as_ref().and_then(|c| c.cpus),
            governor: read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
            load_avg: read("/proc/loadavg").as_deref().and_then(parse_loadavg),
            cpu_ticks: ticks,
            steal_pct_since_boot: ticks.and_then(|t| zero.steal_pct_until(&t)),
            numa_node: read("/proc/self/stat")
                .as_deref()
                .and_then(parse_last_cpu)
                .and_then(numa_node_of_cpu),
            numa_nodes: read("/sys/devices/system/node/online")
                .as_deref()
                .and_then(count_list),
            gpu: None,
        }
    }
}

impl GpuContext {
    /// Reads `ctx`'s device: each attribute the driver refuses is left absent.
    pub fn read(ctx: &Arc<CudaContext>) -> GpuContext {
        use sys::CUdevice_attribute as A;
        let attr = |a: A| ctx.attribute(a).ok();
        let pci_address = match (
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
        ) {
            (Some(d), Some(b), Some(v)) => Some(format!("{d:04x}:{b:02x}:{v:02x}.0")),
            _ => None,
        };
        // the driver reports clocks in kHz; 0 means it does not know
        let mhz = |a: A| attr(a).filter(|&k| k > 0).map(|k| k as f64 / 1e3);
        GpuContext {
            numa_node: pci_address.as_deref().and_then(pci_numa_node),
            pci_address,
            sm_clock_max_mhz: mhz(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            memory_clock_max_mhz: mhz(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            driver: crate::device::kernel_module_version(),
        }
    }
}

/// What `/proc/cpuinfo` says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuInfo {
    pub model: Option<String>,
    pub mean_mhz: Option<f64>,
    pub cpus: Option<u32>,
}

/// The first `model name`, the mean of the `cpu MHz` lines and the count of `processor`
/// lines of a `/proc/cpuinfo` text.
pub fn parse_cpuinfo(text: &str) -> CpuInfo {
    let mut model = None;
    let (mut mhz_sum, mut mhz_n, mut cpus) = (0.0, 0u32, 0u32);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "model name" if model.is_none() && !value.is_empty() => model = Some(value.to_string()),
            "cpu MHz" => {
                if let Ok(v) = value.parse::<f64>() {
                    if v.is_finite() && v > 0.0 {
                        mhz_sum += v;
                        mhz_n += 1;
                    }
                }
            }
            "processor" => cpus += 1,
            _ => {}
        }
    }
    CpuInfo {
        model,
        mean_mhz: (mhz_n > 0).then(|| mhz_sum / mhz_n as f64),
        cpus: (cpus > 0).then_some(cpus),
    }
}

/// The aggregate `cpu` line of a `/proc/stat` text: the sum of its first eight fields (user
/// .. steal; the guest fields after them are already counted in user and nice) and the steal
/// field (the eighth). `None` without such a line or with fewer than eight fields.
pub fn parse_stat_cpu(text: &str) -> Option<CpuTicks> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if fields.len() < 8 {
        return None;
    }
    Some(CpuTicks {
        total: fields[..8].iter().sum(),
        steal: fields[7],
    })
}

/// The three load averages of a `/proc/loadavg` text.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_whitespace().map(str::parse::<f64>);
    let (a, b, c) = (it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?);
    Some([a, b, c])
}

/// Field 39 (`processor`, the CPU last executed on) of a `/proc/PID/stat` text. The command
/// name (field 2) is in parentheses and may hold spaces: fields are counted after its last `)`.
pub fn parse_last_cpu(text: &str) -> Option<u32> {
    let after = &text[text.rfind(')')? + 1..];
    // after the name: field 3 is the first; field 39 is the 37th
    after.split_whitespace().nth(36)?.parse().ok()
}

/// The count of CPUs or nodes in a kernel list such as `0`, `0-3`, `0-1,4,6-7`.
pub fn count_list(text: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<u32>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// The NUMA node whose `/sys/devices/system/node/nodeN/` holds `cpuC`.
fn numa_node_of_cpu(cpu: u32) -> Option<u32> {
    let dir = std::fs::read_dir("/sys/devices/system/node").ok()?;
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse::<u32>()
                .ok()
        })
        .find(|n| {
            std::path::Path::new(&format!("/sys/devices/system/node/node{n}/cpu{cpu}")).exists()
        })
}

/// A `numa_node` file's text: the node, or `None` for -1 (no affinity) or garbage.
pub fn parse_numa_node(text: &str) -> Option<u32> {
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// The NUMA node of the PCI device at `address` (`0000:3b:00.0`), from sysfs.
pub fn pci_numa_node(address: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/bus/pci/devices/{address}/numa_node"))
        .ok()
        .as_deref()
        .and_then(parse_numa_node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_gives_the_model_the_mean_frequency_and_the_cpus() {
        let text = "processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\ncpu MHz\t\t: 2400.000\n\n\
                    processor\t: 1\nmodel name\t: AMD EPYC 9654 96-Core Processor\ncpu MHz\t\t: 3600.500\n";
        let c = parse_cpuinfo(text);
        assert_eq!(c.model.as_deref(), Some("AMD EPYC 9654 96-Core Processor"));
        assert_eq!(c.mean_mhz, Some((2400.0 + 3600.5) / 2.0));
        assert_eq!(c.cpus, Some(2));
        // an ARM cpuinfo has no model name and no MHz: absent, not 0
        let arm = parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n");
        assert_eq!(
            arm,
            CpuInfo {
                model: None,
                mean_mhz: None,
                cpus: Some(1)
            }
        );
    }

    #[test]
    fn the_stat_cpu_line_gives_total_and_steal() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let text = "cpu  100 2 30 800 5 0 3 60 40 0\ncpu0 50 1 15 400 2 0 1 30 20 0\nintr 1\n";
        let t = parse_stat_cpu(text).unwrap();
        assert_eq!(
            t,
            CpuTicks {
                total: 100 + 2 + 30 + 800 + 5 + 3 + 60,
                steal: 60
            }
        );
        // steal between two readings: 30 of 200 ticks
        let later = CpuTicks {
            total: t.total + 200,
            steal: t.steal + 30,
        };
        assert_eq!(t.steal_pct_until(&later), Some(15.0));
        assert_eq!(t.steal_pct_until(&t), None);
        assert_eq!(later.steal_pct_until(&t), None);
        // an old kernel's line without the steal field
        assert_eq!(parse_stat_cpu("cpu  1 2 3 4 5 6 7\n"), None);
        assert_eq!(parse_stat_cpu("intr 5\n"), None);
    }

    #[test]
    fn loadavg_and_lists_parse() {
        assert_eq!(
            parse_loadavg("2.67 2.51 1.95 2/95 454\n"),
            Some([2.67, 2.51, 1.95])
        );
        assert_eq!(parse_loadavg("2.67\n"), None);
        assert_eq!(count_list("0\n"), Some(1));
        assert_eq!(count_list("0-3"), Some(4));
        assert_eq!(count_list("0-1,4,6-7\n"), Some(5));
        assert_eq!(count_list(""), None);
        assert_eq!(count_list("3-1"), None);
        assert_eq!(parse_numa_node("1\n"), Some(1));
        assert_eq!(parse_numa_node("-1\n"), None);
    }

    #[test]
    fn the_last_cpu_is_field_39_even_with_spaces_in_the_name() {
        // field 39 is 5 here; the name "(a b) c" holds a space and a parenthesis
        let mut fields: Vec<String> = (3..=52).map(|i| format!("{}", 1000 + i)).collect();
        fields[39 - 3] = "5".into();
        let text = format!("458 (a b) c) R {}", fields[1..].join(" "));
        // (field 3 is the state "R", already in the text)
        assert_eq!(parse_last_cpu(&text), Some(5));
        assert_eq!(parse_last_cpu("458 (cat) R 1 2"), None);
    }

    #[test]
    fn reading_this_linux_host_fills_what_proc_has() {
        if !std::path::Path::new("/proc/stat").exists() {
            return; // not Linux: every field may be absent
        }
        let h = HostContext::read();
        // /proc/stat, /proc/loadavg and /proc/cpuinfo exist on every Linux
        let t = h.cpu_ticks.expect("/proc/stat has a cpu line");
        assert!(t.total > 0 && t.steal <= t.total);
        assert!(h.load_avg.is_some() && h.cpus.is_some_and(|n| n >= 1));
        let pct = h.steal_pct_since_boot.unwrap();
        assert!((0.0..=100.0).contains(&pct));
        assert!(h.gpu.is_none());
        // absent fields stay out of the JSON rather than reading 0
        let j = serde_json::to_value(HostContext::default()).unwrap();
        assert_eq!(j, serde_json::json!({}));
    }
}
