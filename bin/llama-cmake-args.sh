# Sourced (not run) by bin/test, bin/local-model and .ci/run before pip builds llama-cpp-python
# (the local-model extra, locked as its source distribution): the one copy of its build flags.
# Generic x86-64 flags: a native build enables AVX-512/AMX where a virtual CPU advertises
# instructions it does not run, and the model server dies on its first completion.
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF"
