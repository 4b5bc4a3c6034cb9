//! Gives lib_mrc.so its SONAME, so a program linked against it by path (as OCP's
//! benchmark makefile does, `$(MRC_LIB_DIR)/lib_mrc.so`) records `lib_mrc.so` and finds it
//! through its rpath or `LD_LIBRARY_PATH` wherever it is installed.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,lib_mrc.so");
}
