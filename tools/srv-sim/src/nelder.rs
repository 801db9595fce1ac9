//! Nelder-Mead minimisation, shared by `--calibrate` (load points) and `--calibrate-from`
//! (a step grid): a derivative-free search that suits a cost model with `max`es in it.

/// Minimises `f` from `start` (first steps of 0.7 in each coordinate), at most `iters`
/// iterations; the best point found.
pub fn nelder_mead<const N: usize>(
    f: &impl Fn(&[f64; N]) -> f64,
    start: [f64; N],
    iters: usize,
) -> [f64; N] {
    let mut simplex: Vec<([f64; N], f64)> = (0..=N)
        .map(|i| {
            let mut x = start;
            if i > 0 {
                x[i - 1] += 0.7;
            }
            (x, f(&x))
        })
        .collect();
    for _ in 0..iters {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        if simplex[N].1 - simplex[0].1 < 1e-10 {
            break;
        }
        let mut centroid = [0.0; N];
        for (x, _) in &simplex[..N] {
            for k in 0..N {
                centroid[k] += x[k] / N as f64;
            }
        }
        let along = |t: f64| -> [f64; N] {
            let mut x = [0.0; N];
            for k in 0..N {
                x[k] = centroid[k] + t * (simplex[N].0[k] - centroid[k]);
            }
            x
        };
        let reflected = along(-1.0);
        let fr = f(&reflected);
        if fr < simplex[0].1 {
            let expanded = along(-2.0);
            let fe = f(&expanded);
            simplex[N] = if fe < fr {
                (expanded, fe)
            } else {
                (reflected, fr)
            };
        } else if fr < simplex[N - 1].1 {
            simplex[N] = (reflected, fr);
        } else {
            let contracted = along(0.5);
            let fc = f(&contracted);
            if fc < simplex[N].1 {
                simplex[N] = (contracted, fc);
            } else {
                let best = simplex[0].0;
                for entry in simplex.iter_mut().skip(1) {
                    for (e, b) in entry.0.iter_mut().zip(best) {
                        *e = b + 0.5 * (*e - b);
                    }
                    entry.1 = f(&entry.0);
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex[0].0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_minimum_of_a_shifted_bowl() {
        let f = |x: &[f64; 3]| (x[0] - 1.0).powi(2) + (x[1] + 2.0).powi(2) + (x[2] - 0.5).powi(2);
        let x = nelder_mead(&f, [0.0; 3], 2000);
        for (got, want) in x.iter().zip([1.0, -2.0, 0.5]) {
            assert!((got - want).abs() < 1e-3, "{x:?}");
        }
    }
}
