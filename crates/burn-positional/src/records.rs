//! Saved records read from outside: the bytes of a `.bpk` file, read up front.

/// Reads a burnpack record (`.bpk`) into memory.
///
/// burn's `ModuleRecord::load` keeps tensor data file-backed and reads it lazily, on wgpu as
/// queued work: overwrite or delete the file before that work runs (as a training loop does
/// when it resumes from a checkpoint and later writes the next one to the same path) and the
/// load fails later, far from its cause. Reading the bytes up front removes the hazard.
pub fn read_record(
    path: impl AsRef<std::path::Path>,
) -> Result<burn::store::ModuleRecord, burn::store::RecordError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path)
        .map_err(|err| burn::store::RecordError::Io(format!("{}: {err}", path.display())))?;
    burn::store::ModuleRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
}

pub(crate) fn record_detail(err: burn::store::RecordError) -> String {
    match err {
        burn::store::RecordError::Io(msg) | burn::store::RecordError::Validation(msg) => msg,
    }
}
