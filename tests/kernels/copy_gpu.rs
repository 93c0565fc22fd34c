//! The copy op on a real GPU (skips with a reason without one; WARPNORM_REQUIRE_GPU=1 fails).

#[test]
fn copy_on_gpu_round_trips() {
    let Some(stream) = testkit::gpu::gpu_stream("copy_on_gpu_round_trips") else {
        return;
    };
    for n in [1usize, 3, 1000, 1 << 20] {
        let data: Vec<f32> = (0..n).map(|i| i as f32 - 3.5).collect();
        let src = stream.clone_htod(&data).unwrap();
        let mut dst = stream.alloc_zeros::<f32>(n).unwrap();
        warpnorm::copy::copy(&stream, src.as_view(), dst.as_view_mut()).unwrap();
        assert_eq!(stream.clone_dtoh(&dst).unwrap(), data, "n={n}");
        // Misaligned views take the scalar kernel.
        let mut dst2 = stream.alloc_zeros::<f32>(n + 1).unwrap();
        warpnorm::copy::copy(&stream, src.as_view(), dst2.slice_mut(1..)).unwrap();
        assert_eq!(
            &stream.clone_dtoh(&dst2).unwrap()[1..],
            &data[..],
            "n={n} offset"
        );
    }
}

#[test]
fn copy_rejects_length_mismatch_before_launch() {
    let Some(stream) = testkit::gpu::gpu_stream("copy_rejects_length_mismatch_before_launch")
    else {
        return;
    };
    let src = stream.clone_htod(&[1.0f32, 2.0]).unwrap();
    let mut dst = stream.alloc_zeros::<f32>(3).unwrap();
    let err = warpnorm::copy::copy(&stream, src.as_view(), dst.as_view_mut()).unwrap_err();
    assert!(
        matches!(
            err,
            warpnorm::Error::Length {
                expected: 2,
                given: 3,
                ..
            }
        ),
        "{err}"
    );
}
