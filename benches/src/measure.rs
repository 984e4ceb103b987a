//! Time-boxed measurement loops and the figures they produce.

use std::time::{Duration, Instant};

/// A time box: a loop runs while its budget lasts and it has done fewer than `max_ops`
/// operations (the cap keeps fast workloads from writing gigabytes).
#[derive(Debug, Clone, Copy)]
pub struct Timebox {
    pub budget: Duration,
    pub max_ops: u64,
    start: Instant,
}

impl Timebox {
    pub fn start(budget: Duration, max_ops: u64) -> Timebox {
        Timebox {
            budget,
            max_ops,
            start: Instant::now(),
        }
    }

    /// True while the loop should do another operation, having done `ops` so far.
    pub fn running(&self, ops: u64) -> bool {
        ops < self.max_ops && self.start.elapsed() < self.budget
    }
}

/// What one measurement loop (or several threads of one) observed.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Units counted (operations, commits or records; see the figure's unit).
    pub units: u64,
    /// Time the figure is computed over: the sum of the timed sections, or the wall time of a
    /// multi-threaded run.
    pub timed: Duration,
    /// Latency of each timed operation (commits), when recorded.
    pub latencies: Vec<Duration>,
}

impl Sample {
    /// Units per second.
    pub fn rate(&self) -> f64 {
        let s = self.timed.as_secs_f64();
        if s > 0.0 { self.units as f64 / s } else { 0.0 }
    }

    /// A percentile (0..=100) of the recorded latencies, in microseconds.
    pub fn percentile_us(&self, p: f64) -> Option<f64> {
        if self.latencies.is_empty() {
            return None;
        }
        let mut v = self.latencies.clone();
        v.sort_unstable();
        let rank = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
        v.get(rank.min(v.len() - 1)).map(|d| d.as_secs_f64() * 1e6)
    }

    /// Merges the samples of threads that ran concurrently over `wall`.
    pub fn merge_concurrent(parts: Vec<Sample>, wall: Duration) -> Sample {
        let mut out = Sample {
            timed: wall,
            ..Sample::default()
        };
        for p in parts {
            out.units += p.units;
            out.latencies.extend(p.latencies);
        }
        out
    }

    /// Times `op` and adds it to the sample as `units` units with one latency entry.
    pub fn time<T, E>(&mut self, units: u64, op: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let t = Instant::now();
        let out = op()?;
        let d = t.elapsed();
        self.timed += d;
        self.units += units;
        self.latencies.push(d);
        Ok(out)
    }
}

/// One reported figure, from one or more rounds of the same measurement.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Stable JSON key, e.g. `sqlite_single_commits_per_s`.
    pub key: &'static str,
    /// Human label for the table.
    pub label: &'static str,
    /// The median of the rounds' rates.
    pub value: f64,
    pub unit: &'static str,
    /// Each round's rate, in the order run.
    pub rounds: Vec<f64>,
    /// Units counted and seconds measured over all rounds.
    pub units: u64,
    pub seconds: f64,
    /// Latency percentiles over all rounds' timed operations.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
}

/// The median of some values (the mean of the middle two for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl Figure {
    pub fn from_rounds(
        key: &'static str,
        label: &'static str,
        unit: &'static str,
        rounds: &[Sample],
    ) -> Figure {
        let rates: Vec<f64> = rounds.iter().map(Sample::rate).collect();
        let mut all = Sample::default();
        for r in rounds {
            all.units += r.units;
            all.timed += r.timed;
            all.latencies.extend_from_slice(&r.latencies);
        }
        Figure {
            key,
            label,
            value: median(&rates),
            unit,
            rounds: rates,
            units: all.units,
            seconds: all.timed.as_secs_f64(),
            p50_us: all.percentile_us(50.0),
            p99_us: all.percentile_us(99.0),
        }
    }
}

/// Releases the threads waiting on `barrier` (each took one place; this call takes the last) and
/// joins them: their samples, and the wall time from the release to the last join. A thread that
/// panicked is an error naming `what` it was.
pub fn release_and_join(
    barrier: &std::sync::Barrier,
    handles: Vec<std::thread::ScopedJoinHandle<'_, crate::BenchResult<Sample>>>,
    what: &str,
) -> (Vec<crate::BenchResult<Sample>>, Duration) {
    barrier.wait();
    let start = Instant::now();
    let parts = handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(format!("{what} thread panicked").into()))
        })
        .collect();
    (parts, start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_rate() {
        let s = Sample {
            units: 100,
            timed: Duration::from_secs(2),
            latencies: (1..=100).map(Duration::from_micros).collect(),
        };
        assert_eq!(s.rate(), 50.0);
        assert_eq!(s.percentile_us(50.0).map(f64::round), Some(51.0));
        assert_eq!(s.percentile_us(99.0).map(f64::round), Some(99.0));
    }

    #[test]
    fn median_of_rounds() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
