# libptcfs_client: included by transport/CMakeLists.txt, and alone by the top-level
# CMakeLists.txt when PTCFS_CLIENT_ONLY is on (the Python package's build, pyproject.toml):
# it needs nlohmann_json and threads, and CUDA where PTCFS_CUDA found it; nothing else.
# The direct data path's client (transport/ptcfs_client.h, direct_client.h),
# a shared library that needs nothing but libc (python/ptcfs/direct.py loads it with ctypes).
# With CUDA it also copies into GPU memory (transport/gpu/); cudart is linked statically, so
# the library still loads, and says why it cannot copy, on a machine without a driver.
set(_t ${PROJECT_SOURCE_DIR}/transport)
set(_p ${PROJECT_SOURCE_DIR}/ptc)
add_library(ptcfs_client SHARED
  ${_t}/direct_client.cc
  ${_t}/direct_protocol.cc
  ${_t}/ptcfs_client.cc
  ${_t}/ptcfs_client_nccl.cc
  ${_t}/gpu/device_read.cc
  ${_t}/gpu/p2p_ops.cc
  ${_t}/gpu/upload.cc
  ${_t}/gpu/upload_plan.cc
  # The live plan (ptc/live_plan.h) and what it is built from (ptc/ and ptc/base/), compiled PIC into the library:
  # pure code, JSON only (no RocksDB, FUSE or Boost).
  ${_p}/base/status.cc
  ${_p}/dtype.cc
  ${_p}/region.cc
  ${_p}/base/json_util.cc
  ${_p}/model.cc
  ${_p}/layout.cc
  ${_p}/plan.cc
  ${_p}/cluster_plan.cc
  ${_p}/cluster.cc
  ${_p}/live_plan.cc
)
if(PTCFS_CUDA)
  # Its own object library: the client's C++20 (CXX_STANDARD) must not become CUDA20, which
  # CMake 3.25 cannot ask nvcc for.
  add_library(ptcfs_client_cuda OBJECT ${_t}/gpu/cuda_device.cu)
  set_target_properties(ptcfs_client_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_STANDARD 17
    CUDA_RUNTIME_LIBRARY None)
  target_include_directories(ptcfs_client_cuda PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(ptcfs_client_cuda PRIVATE CUDA::cudart_static ptcfs_warnings)
  target_sources(ptcfs_client PRIVATE $<TARGET_OBJECTS:ptcfs_client_cuda>)
  set_target_properties(ptcfs_client PROPERTIES CUDA_RUNTIME_LIBRARY None)
  target_link_libraries(ptcfs_client PRIVATE CUDA::cudart_static)
else()
  target_sources(ptcfs_client PRIVATE ${_t}/gpu/no_cuda.cc)
endif()
# The NCCL communicator (gpu/nccl_comm.h) needs CUDA and NCCL's header at build time only: NCCL
# itself is loaded at run time (dlopen), so the library needs no NCCL to load.
set(PTCFS_NCCL OFF)
if(PTCFS_CUDA AND PTCFS_WITH_NCCL)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  if(NCCL_INCLUDE_DIR)
    set(PTCFS_NCCL ON)
  endif()
endif()
message(STATUS "ptcfs: NCCL communicator ${PTCFS_NCCL}")
if(PTCFS_NCCL)
  target_sources(ptcfs_client PRIVATE ${_t}/gpu/nccl_comm.cc)
  target_include_directories(ptcfs_client PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(ptcfs_client PRIVATE ${CMAKE_DL_LIBS})
else()
  target_sources(ptcfs_client PRIVATE ${_t}/gpu/no_nccl.cc)
endif()
set_target_properties(ptcfs_client PROPERTIES POSITION_INDEPENDENT_CODE ON OUTPUT_NAME ptcfs_client
  PUBLIC_HEADER "${_t}/ptcfs_client.h")
target_include_directories(ptcfs_client PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(ptcfs_client PRIVATE nlohmann_json::nlohmann_json Threads::Threads ptcfs_warnings)
if(SKBUILD)
  # The wheel (pyproject.toml): the library inside the package, where ptcfs.direct looks first.
  install(TARGETS ptcfs_client LIBRARY DESTINATION ptcfs PUBLIC_HEADER DESTINATION ptcfs/include)
else()
  install(TARGETS ptcfs_client LIBRARY DESTINATION lib PUBLIC_HEADER DESTINATION include)
endif()
