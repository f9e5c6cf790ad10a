//! Lists, as a U-Net keeps its skips (`hs = [conv_in(x)]`, `hs.append(h)`,
//! `hs.pop()`): `let mut hs = vec![..]`, `hs.push(h)`, `hs.pop()`,
//! `hs[-1]`, `len(hs)`, unrolled when the macro expands. The model with a
//! list computes what the same model written out does.

use flaxen::interop::flax;
use flaxen::prelude::*;

pub struct WithList;

#[compact]
impl WithList {
    fn forward(x: Input<4, 8, 8>, ch_mult: Param<{ (1, 2) }>) {
        let mut hs = vec![Conv(4, (3, 3), name = "conv_in")(x)];
        for m in ch_mult {
            let h = relu(Conv(4 * m, (3, 3))(hs[-1]));
            hs.push(h);
        }
        let mut h = hs.pop();
        for _ in 0..len(ch_mult) {
            h = Conv(4, (3, 3))(concatenate((h, hs.pop()), axis = -3));
        }
        h
    }
}

pub struct WrittenOut;

#[compact]
impl WrittenOut {
    fn forward(x: Input<4, 8, 8>) {
        let h0 = Conv(4, (3, 3), name = "conv_in")(x);
        let h1 = relu(Conv(4, (3, 3))(h0));
        let h2 = relu(Conv(8, (3, 3))(h1));
        let h = Conv(4, (3, 3))(concatenate((h2, h1), axis = -3));
        Conv(4, (3, 3))(concatenate((h, h0), axis = -3))
    }
}

#[test]
fn a_list_of_skips_unrolls_as_written_out() {
    let dev = Cpu::seed_from_u64(9);
    let a = dev.build_module::<WithList, f64>();
    let mut b = dev.build_module::<WrittenOut, f64>();
    flax::load(&mut b, &flax::save(&a).unwrap()).unwrap();
    let x: Tensor<Rank4<2, 4, 8, 8>, f64, _> = dev.sample_normal();
    assert_eq!(a.forward(x.clone()).as_vec(), b.forward(x.clone()).as_vec());
    let ga = a.forward(x.leaky_trace()).sum().backward();
    let gb = b.forward(x.leaky_trace()).sum().backward();
    assert_eq!(ga.get(&x).as_vec(), gb.get(&x).as_vec());
}
