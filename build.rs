//! Root build script.
//!
//! Without feature `verbs` it does nothing: the default build needs nothing from the system.
//!
//! With feature `verbs` it generates bindings to rdma-core's `<infiniband/verbs.h>` and
//! `<rdma/rdma_cma.h>` with bindgen (needs libibverbs-dev, librdmacm-dev and libclang-dev),
//! and links libibverbs and librdmacm. Most of the verbs data path (`ibv_post_send`,
//! `ibv_post_recv`, `ibv_poll_cq`, `ibv_alloc_dm`, `___ibv_query_port`, ...) is `static
//! inline` in the header, so it has no symbol to link against: bindgen's static-function
//! wrapping writes a C file with one exported wrapper per inline function, which this script
//! compiles with `cc`; the generated Rust declarations link to those wrappers.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    #[cfg(feature = "verbs")]
    verbs::generate();
}

#[cfg(feature = "verbs")]
mod verbs {
    use std::env;
    use std::path::PathBuf;

    const HEADER: &str = "#include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\n";

    fn fail(what: &str) -> ! {
        panic!(
            "remora feature `verbs`: {what}. Install rdma-core's headers and libclang \
             (Debian: apt-get install libibverbs-dev librdmacm-dev libclang-dev), or build \
             without `--features verbs`."
        )
    }

    pub fn generate() {
        let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        let header = out.join("remora_verbs.h");
        std::fs::write(&header, HEADER)
            .unwrap_or_else(|e| fail(&format!("writing {header:?}: {e}")));
        let wrappers = out.join("remora_verbs_static_fns");

        let bindings = bindgen::Builder::default()
            .header(header.to_string_lossy())
            .allowlist_function("ibv_.*|__ibv_.*|___ibv_.*|rdma_.*")
            .allowlist_type("ibv_.*|rdma_.*")
            .allowlist_var("IBV_.*|RDMA_.*")
            .default_enum_style(bindgen::EnumVariation::Consts)
            .prepend_enum_name(false)
            .derive_default(true)
            .layout_tests(false)
            .generate_comments(false)
            .wrap_static_fns(true)
            .wrap_static_fns_path(&wrappers)
            .generate()
            .unwrap_or_else(|e| {
                fail(&format!(
                    "bindgen could not read the rdma-core headers ({e})"
                ))
            });
        bindings
            .write_to_file(out.join("verbs_bindings.rs"))
            .unwrap_or_else(|e| fail(&format!("writing the bindings: {e}")));

        // The wrappers include the header by its absolute path.
        cc::Build::new()
            .file(wrappers.with_extension("c"))
            .include(&out)
            .warnings(false)
            .compile("remora_verbs_static_fns");

        println!("cargo::rustc-link-lib=dylib=ibverbs");
        println!("cargo::rustc-link-lib=dylib=rdmacm");
    }
}
