//! Thin checked wrappers over the CUDA virtual memory management calls (`cudarc::driver::sys`):
//! reserve address space, create physical granules, map, set access, unmap, release.
//! Portable: only driver API calls, no OS-specific paths.

use cudarc::driver::sys;
use cudarc::driver::DriverError;

/// Allocation properties for plain device memory on `device`.
pub fn device_prop(device: i32) -> sys::CUmemAllocationProp {
    // SAFETY: the struct is plain old data; zero is a valid "no flags" value for every field.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop
}

/// (minimum, recommended) allocation granularity in bytes (cuMemGetAllocationGranularity).
pub fn granularity(device: i32) -> Result<(usize, usize), DriverError> {
    let prop = device_prop(device);
    let (mut min, mut rec) = (0usize, 0usize);
    // SAFETY: valid out-pointers and property struct.
    unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut min,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
        .result()?;
        sys::cuMemGetAllocationGranularity(
            &mut rec,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
        .result()?;
    }
    Ok((min, rec))
}

/// A reserved virtual address range, freed on drop (everything mapped in it must be unmapped first).
pub struct Reservation {
    /// First device virtual address of the range.
    pub base: u64,
    /// Bytes reserved.
    pub size: usize,
}

impl Reservation {
    /// Reserves `size` bytes of device address space aligned to `align`.
    pub fn new(size: usize, align: usize) -> Result<Self, DriverError> {
        let mut base = 0;
        // SAFETY: out-pointer valid; no fixed address requested.
        unsafe { sys::cuMemAddressReserve(&mut base, size, align, 0, 0).result()? };
        Ok(Self { base, size })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: releases the range reserved in `new`.
        let _ = unsafe { sys::cuMemAddressFree(self.base, self.size) };
    }
}

/// cuMemCreate of `size` bytes of physical device memory.
pub fn create(size: usize, device: i32) -> Result<sys::CUmemGenericAllocationHandle, DriverError> {
    let prop = device_prop(device);
    let mut h = 0;
    // SAFETY: valid out-pointer and properties.
    unsafe { sys::cuMemCreate(&mut h, size, &prop, 0).result()? };
    Ok(h)
}

/// cuMemMap of handle `h` (offset 0) at `va` for `size` bytes.
pub fn map(va: u64, size: usize, h: sys::CUmemGenericAllocationHandle) -> Result<(), DriverError> {
    // SAFETY: `va..va+size` lies in a reservation and is unmapped (caller's invariant).
    unsafe { sys::cuMemMap(va, size, 0, h, 0).result() }
}

/// cuMemSetAccess read-write for `device` on `va..va+size`.
pub fn set_access(va: u64, size: usize, device: i32) -> Result<(), DriverError> {
    // SAFETY: the struct is plain old data.
    let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = device;
    desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    // SAFETY: one valid descriptor for a mapped range.
    unsafe { sys::cuMemSetAccess(va, size, &desc, 1).result() }
}

/// cuMemUnmap of `va..va+size`.
pub fn unmap(va: u64, size: usize) -> Result<(), DriverError> {
    // SAFETY: the range was mapped by `map` (caller's invariant).
    unsafe { sys::cuMemUnmap(va, size).result() }
}

/// cuMemRelease of a handle from `create`.
pub fn release(h: sys::CUmemGenericAllocationHandle) -> Result<(), DriverError> {
    // SAFETY: the handle came from `create` and is released once.
    unsafe { sys::cuMemRelease(h).result() }
}
