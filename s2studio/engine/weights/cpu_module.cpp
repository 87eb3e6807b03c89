// The Python module around the CPU kernels' library. kernel_build.py compiles every .cpp of this folder once per
// CPU width into a module named `_cpu_<width>` (TORCH_EXTENSION_NAME); importing it loads the library, whose
// TORCH_LIBRARY blocks register the ops. The module itself only records what the loader (kernels.py) checks:
// the width it was compiled for, the digest of the sources it was compiled from and the torch it was built for.

#include <Python.h>

#define S2_STRING_OF(x) #x
#define S2_STRING(x) S2_STRING_OF(x)
#define S2_JOIN_OF(a, b) a##b
#define S2_JOIN(a, b) S2_JOIN_OF(a, b)

static struct PyModuleDef s2_module = {
    PyModuleDef_HEAD_INIT, S2_STRING(TORCH_EXTENSION_NAME),
    "S2 Studio's CPU kernels (torch.ops.s2studio_cpu), built for one CPU width", -1, nullptr};

PyMODINIT_FUNC S2_JOIN(PyInit_, TORCH_EXTENSION_NAME)(void) {
  PyObject* module = PyModule_Create(&s2_module);
  if (module == nullptr) return nullptr;
  if (PyModule_AddStringConstant(module, "WIDTH", S2_STRING(S2_KERNEL_WIDTH)) < 0 ||
      PyModule_AddStringConstant(module, "SOURCES", S2_STRING(S2_SOURCES_DIGEST)) < 0 ||
      PyModule_AddStringConstant(module, "TORCH", S2_STRING(S2_TORCH)) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
