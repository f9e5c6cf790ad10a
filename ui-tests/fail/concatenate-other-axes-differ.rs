use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<3, 8, 8>) {
        let y = avg_pool(x, (2, 2), strides = (2, 2));
        let z = concatenate((x, y), axis = -3);
        Dense(2)(flatten(z))
    }
}

fn main() {}
