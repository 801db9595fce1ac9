//! The CUDA libraries collbench loads at run time through cudarc (dynamic loading, so the
//! binary builds and runs without CUDA): the names cudarc tries for each, in its order
//! (`cudarc::get_lib_name_candidates`: with the `cuda-13000` build, `libcublas.so.13` and
//! `.12` among them, and `libcuda.so.1`), which one loads, from which file and at which
//! version, as one line; or, when none loads, one line naming every name looked for.
//!
//! The first candidate that `dlopen` finds is the one cudarc loads (it tries the same names in
//! the same order), so what is reported is what runs.

use std::ffi::{CStr, CString, c_int, c_void};

/// A library one of the GPU paths needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lib {
    /// The CUDA driver API (libcuda, from the NVIDIA driver).
    Driver,
    Cublas,
    CublasLt,
    Nccl,
}

impl Lib {
    /// The stem cudarc builds its candidate names from.
    fn stem(self) -> &'static str {
        match self {
            Lib::Driver => "cuda",
            Lib::Cublas => "cublas",
            Lib::CublasLt => "cublasLt",
            Lib::Nccl => "nccl",
        }
    }

    /// What the library is, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Lib::Driver => "the CUDA driver",
            Lib::Cublas => "cuBLAS",
            Lib::CublasLt => "cuBLASLt",
            Lib::Nccl => "NCCL",
        }
    }

    /// The file names cudarc tries, in its order, each once.
    pub fn candidates(self) -> Vec<String> {
        let mut names = Vec::new();
        for n in cudarc::get_lib_name_candidates(self.stem()) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }

    /// The library as cudarc will load it, or None when no candidate loads.
    pub fn find(self) -> Option<Loaded> {
        self.candidates().into_iter().find_map(|name| {
            let handle = DlHandle::open(&name)?;
            Some(Loaded {
                lib: self,
                path: handle.path(self.version_symbol()),
                version: self.version(&handle),
                name,
            })
        })
    }

    /// A symbol every version exports, which says the version (and locates the file).
    fn version_symbol(self) -> &'static str {
        match self {
            Lib::Driver => "cuDriverGetVersion",
            Lib::Cublas => "cublasGetProperty",
            Lib::CublasLt => "cublasLtGetProperty",
            Lib::Nccl => "ncclGetVersion",
        }
    }

    fn version(self, h: &DlHandle) -> Option<String> {
        let f = h.symbol(self.version_symbol())?;
        match self {
            Lib::Driver | Lib::Nccl => {
                // SAFETY: cuDriverGetVersion(int*) and ncclGetVersion(int*) both return a
                // status and write one int.
                let get: unsafe extern "C" fn(*mut c_int) -> c_int =
                    unsafe { std::mem::transmute(f) };
                let mut v: c_int = 0;
                if unsafe { get(&mut v) } != 0 {
                    return None;
                }
                Some(if self == Lib::Driver {
                    // 13000 is 13.0.
                    format!("for CUDA {}.{}", v / 1000, (v % 1000) / 10)
                } else {
                    // NCCL_VERSION_CODE since 2.9: major x 10000 + minor x 100 + patch.
                    format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
                })
            }
            Lib::Cublas | Lib::CublasLt => {
                // SAFETY: cublas(Lt)GetProperty(libraryPropertyType, int*): MAJOR_VERSION 0,
                // MINOR_VERSION 1, PATCH_LEVEL 2; returns a status, writes one int.
                let get: unsafe extern "C" fn(c_int, *mut c_int) -> c_int =
                    unsafe { std::mem::transmute(f) };
                let mut parts = [0; 3];
                for (kind, part) in parts.iter_mut().enumerate() {
                    if unsafe { get(kind as c_int, part) } != 0 {
                        return None;
                    }
                }
                Some(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
            }
        }
    }
}

/// One library found: the name that loaded, the file it is, its version when it says.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub lib: Lib,
    pub name: String,
    pub path: Option<String>,
    pub version: Option<String>,
}

impl Loaded {
    /// `cuBLAS 13.0.2 (libcublas.so.13 = /path/libcublas.so.13)`.
    pub fn describe(&self) -> String {
        format!(
            "{}{} ({}{})",
            self.lib.what(),
            self.version
                .as_ref()
                .map(|v| format!(" {v}"))
                .unwrap_or_default(),
            self.name,
            self.path
                .as_ref()
                .filter(|p| **p != self.name)
                .map(|p| format!(" = {p}"))
                .unwrap_or_default()
        )
    }
}

/// Finds every library of `libs`: one line saying what loaded, or an error line naming, for
/// each library that did not, every name looked for. `hint` says how to fix it.
pub fn load(libs: &[Lib], flag: &str, hint: &dyn Fn(Lib) -> String) -> anyhow::Result<String> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for &lib in libs {
        match lib.find() {
            Some(l) => found.push(l.describe()),
            None => {
                // cudarc also tries Windows-style `lib{stem}64_NN.so` names: counted, not listed.
                let all = lib.candidates();
                let windows = format!("lib{}64", lib.stem());
                let listed: Vec<&str> = all
                    .iter()
                    .map(String::as_str)
                    .filter(|n| !n.starts_with(&windows))
                    .collect();
                missing.push(format!(
                    "cannot load {}: looked for {} (and {} {windows}* names) on LD_LIBRARY_PATH and the system's library paths ({})",
                    lib.what(),
                    listed.join(" "),
                    all.len() - listed.len(),
                    hint(lib)
                ))
            }
        }
    }
    if missing.is_empty() {
        Ok(format!("loaded {}", found.join(", ")))
    } else {
        Err(servbench::cli::usage(format!(
            "{flag}: {}",
            missing.join("; and ")
        )))
    }
}

/// A `dlopen` handle, closed on drop.
struct DlHandle(*mut c_void);

impl DlHandle {
    fn open(name: &str) -> Option<DlHandle> {
        let c = CString::new(name).ok()?;
        // SAFETY: dlopen with a valid C string; a null handle is "not found".
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        // `then`, not `then_some`: a DlHandle of null would be dlclose(NULL) on drop.
        (!h.is_null()).then(|| DlHandle(h))
    }

    fn symbol(&self, name: &str) -> Option<*mut c_void> {
        let c = CString::new(name).ok()?;
        // SAFETY: a live handle and a valid C string.
        let p = unsafe { libc::dlsym(self.0, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    /// The file the library was loaded from, through the address of `symbol` in it.
    fn path(&self, symbol: &str) -> Option<String> {
        let addr = self.symbol(symbol)?;
        // SAFETY: dladdr fills `info` for an address inside a loaded object; dli_fname then
        // points to a NUL-terminated string owned by the loader.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(addr, &mut info) == 0 || info.dli_fname.is_null() {
                return None;
            }
            Some(
                CStr::from_ptr(info.dli_fname)
                    .to_string_lossy()
                    .into_owned(),
            )
        }
    }
}

impl Drop for DlHandle {
    fn drop(&mut self) {
        // SAFETY: opened once by `open`, closed once here.
        unsafe {
            libc::dlclose(self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cudarc built for CUDA 13 tries the CUDA 13 names the device's wheels ship (and CUDA
    /// 12's), and the driver's soname.
    #[test]
    fn the_names_tried_include_cuda_13s_and_the_drivers() {
        assert!(
            Lib::Cublas
                .candidates()
                .contains(&"libcublas.so.13".to_string())
        );
        assert!(
            Lib::Cublas
                .candidates()
                .contains(&"libcublas.so.12".to_string())
        );
        assert!(
            Lib::CublasLt
                .candidates()
                .contains(&"libcublasLt.so.13".to_string())
        );
        assert!(
            Lib::Driver
                .candidates()
                .contains(&"libcuda.so.1".to_string())
        );
        assert!(Lib::Nccl.candidates().contains(&"libnccl.so".to_string()));
    }

    /// A library that is there is found, named by its file, and a missing one lists every name.
    #[test]
    fn a_library_found_is_named_with_its_file_and_a_missing_one_lists_the_names_tried() {
        let libc = DlHandle::open("libc.so.6").expect("libc.so.6 loads");
        let path = libc.path("printf").expect("dladdr names libc's file");
        assert!(path.contains("libc"), "{path}");
        assert!(DlHandle::open("libnot-a-library.so.99").is_none());
        let loaded = Loaded {
            lib: Lib::Cublas,
            name: "libcublas.so.13".into(),
            path: Some("/w/nvidia/cublas/lib/libcublas.so.13".into()),
            version: Some("13.0.2".into()),
        };
        assert_eq!(
            loaded.describe(),
            "cuBLAS 13.0.2 (libcublas.so.13 = /w/nvidia/cublas/lib/libcublas.so.13)"
        );
    }
}
