//! Compiles csrc/onednn.c, the C side of the bf16 matmul, when the `onednn` feature is
//! on, and links the system's oneDNN 2.x (Debian: libdnnl-dev) and its OpenMP runtime.

fn main() {
    #[cfg(feature = "onednn")]
    {
        println!("cargo:rerun-if-changed=csrc/onednn.c");
        cc::Build::new()
            .file("csrc/onednn.c")
            .warnings(true)
            .compile("towerrec_onednn");
        println!("cargo:rustc-link-lib=dnnl");
        println!("cargo:rustc-link-lib=gomp");
    }
}
