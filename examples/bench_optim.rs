use flaxen_runtime::dfdx::prelude::*;
use flaxen_runtime::dfdx::optim::*;
use std::time::Instant;

fn main() {
    let dev: Cpu = Default::default();
    
    let mut p: Tensor<Rank1<824458>, f32, Cpu> = dev.sample_normal();
    let mut grads = p.alloc_grads();
    let g: Tensor<Rank1<824458>, f32, Cpu> = dev.sample_normal();
    // fill grads
    let _ = &mut grads;
    let loss = (p.leaky_trace() * g.clone()).sum();
    let grads = loss.backward();
    let mut opt = Adam::new(&p, AdamConfig::default());
    for _ in 0..3 { opt.update(&mut p, &grads).unwrap(); }
    let t = Instant::now();
    let iters = 50;
    for _ in 0..iters { opt.update(&mut p, &grads).unwrap(); }
    let dt = t.elapsed().as_secs_f64() / iters as f64;
    println!("dfdx adam {:.3} ms", dt * 1e3);

    let mut m: Tensor<Rank1<824458>, f32, Cpu> = dev.zeros();
    let mut v: Tensor<Rank1<824458>, f32, Cpu> = dev.zeros();
    let mut step = |p: &mut Tensor<Rank1<824458>, f32, Cpu>| {
        let g = grads.get(p);
        m.axpy(0.9, &g, 0.1);
        v.axpy(0.999, &g.square(), 0.001);
        let u = (m.clone() * 1.1) / ((v.clone() * 1.2).sqrt() + 1e-8) * (-1e-3);
        p.axpy(1.0, &u, 1.0);
    };
    for _ in 0..3 { step(&mut p); }
    let t = Instant::now();
    for _ in 0..iters { step(&mut p); }
    let dt2 = t.elapsed().as_secs_f64() / iters as f64;
    println!("composed {:.3} ms ratio {:.2}", dt2 * 1e3, dt2/dt);
    let t = Instant::now();
    for _ in 0..iters { let _g = grads.get(&p); }
    println!("grads.get {:.3} ms", t.elapsed().as_secs_f64() / iters as f64 * 1e3);
    let t = Instant::now();
    for _ in 0..iters { let _g = m.clone() * 1.1; }
    println!("scalar mul {:.3} ms", t.elapsed().as_secs_f64() / iters as f64 * 1e3);
    let t = Instant::now();
    for _ in 0..iters { let _g = m.clone() / v.clone(); }
    println!("div {:.3} ms", t.elapsed().as_secs_f64() / iters as f64 * 1e3);
    let t = Instant::now();
    for _ in 0..iters { p.axpy(1.0, &m, 1e-9); }
    println!("axpy {:.3} ms", t.elapsed().as_secs_f64() / iters as f64 * 1e3);
}
