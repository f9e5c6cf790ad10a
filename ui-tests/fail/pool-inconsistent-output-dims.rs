// A 2x2 window with stride 2 halves a 28x28 input to 14x14; a 13x14 output
// must not compile.
use flaxen::runtime::layers::{AvgPool2D, Window2D};

const _: Window2D = AvgPool2D::<32, 2, 2, 2, 2, 0, 0, 0, 0, 28, 28, 13, 14>::GEOMETRY;

fn main() {}
