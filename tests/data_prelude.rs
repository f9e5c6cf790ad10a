//! The data, checkpoint, logging and guard pieces used together through
//! `flaxen::prelude` alone, the way the `train` example uses them.

use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::shapes::Rank5;
use flaxen::prelude::*;
use flaxen::runtime::data::digits;

#[test]
fn a_short_run_with_every_piece() {
    let dev = Cpu::default();
    let (train, test) = digits::load().unwrap();
    let mut loader: Loader<Rank3<1, 8, 8>, 32, f32, Cpu> =
        Loader::new(train, &dev, LoaderConfig::new(0)).unwrap();
    let mut eval: Loader<Rank3<1, 8, 8>, 100, f32, Cpu> = Loader::new(
        test,
        &dev,
        LoaderConfig::new(0).shuffle(false).drop_last(false),
    )
    .unwrap();
    let model = dev.build_module::<(Linear<64, 10>,), f32>();

    let run = std::env::temp_dir().join(format!("flaxen-prelude-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run);
    let mut metrics = MetricsLogger::new(&run).unwrap();
    let mut progress = Progress::hidden(4, 32 * 5);
    let manager = CheckpointManager::new(run.join("checkpoints"), 2).unwrap();

    for scan in 1..=4u64 {
        let (x, y) = loader.next_stacked::<5>().unwrap();
        let _: (
            Tensor<Rank5<5, 32, 1, 8, 8>, f32, Cpu>,
            Tensor<Rank2<5, 32>, usize, Cpu>,
        ) = (x, y);
        check_finite(&model, None, scan * 5).unwrap();
        progress.update(scan, 0.5, 0.9);
        metrics
            .log(scan * 5, "train", &[("loss", 0.5), ("accuracy", 0.9)])
            .unwrap();
        let mut ckpt = Checkpoint::new(scan * 5);
        ckpt.add_module("params", &model)
            .unwrap()
            .add("data", &loader)
            .unwrap();
        manager.save(&ckpt).unwrap();
    }
    let mut seen = 0;
    for _ in 0..eval.batches_per_epoch() {
        let (x, _y) = eval.next_batch_dyn().unwrap();
        seen += x.shape().0;
    }
    assert_eq!(seen, 297);
    progress.finish();

    let mut model2 = dev.build_module::<(Linear<64, 10>,), f32>();
    let (train, _) = digits::load().unwrap();
    let mut loader2: Loader<Rank3<1, 8, 8>, 32, f32, Cpu> =
        Loader::new(train, &dev, LoaderConfig::new(1)).unwrap();
    let step = manager
        .restore_latest()
        .unwrap()
        .unwrap()
        .restore()
        .module("params", &mut model2)
        .part("data", &mut loader2)
        .apply()
        .unwrap();
    assert_eq!(step, 20);
    assert_eq!(loader2.state(), loader.state());
    assert_eq!(model2.0.weight.array(), model.0.weight.array());
    let _ = std::fs::remove_dir_all(&run);
}
