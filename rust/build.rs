//! Sets PyO3's configuration flags (`Py_GIL_DISABLED` for a free-threaded interpreter) when the
//! Python bindings are built.

fn main() {
    #[cfg(feature = "python")]
    {
        pyo3_build_config::use_pyo3_cfgs();
        pyo3_build_config::print_expected_cfgs();
    }
    #[cfg(not(feature = "python"))]
    println!("cargo::rustc-check-cfg=cfg(Py_GIL_DISABLED)");
}
