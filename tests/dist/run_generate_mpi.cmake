# Run by ctest (kappa.dist.generate_mpi): kappa-generate-mpi on 1 and 3 ranks
# must print the text kappa-generate prints for the same model and options,
# greedy and sampled with a seed, and rank 0 alone prints; the allreduce
# payload it reports on 3 ranks is 2 d floats per token and layer.
foreach(var MPIEXEC GENERATE_MPI GENERATE SOURCE_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_generate_mpi.cmake: ${var} is not set")
  endif()
endforeach()
function(expect_same label)
  cmake_parse_arguments(PARSE_ARGV 1 x "" "MODEL;D" "ARGS;MPI_ARGS")
  set(model "${SOURCE_DIR}/tests/data/models/${x_MODEL}")
  math(EXPR per_layer "8 * ${x_D}")
  execute_process(COMMAND "${GENERATE}" --model "${model}" ${x_ARGS}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE want ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${label}: kappa-generate failed (${rc}): ${err}")
  endif()
  foreach(p 1 3)
    execute_process(COMMAND "${MPIEXEC}" -n ${p} --oversubscribe "${GENERATE_MPI}" --model "${model}"
                            ${x_ARGS} ${x_MPI_ARGS}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE got ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${label}: kappa-generate-mpi on ${p} ranks failed (${rc}): ${err}")
    endif()
    if(NOT got STREQUAL want)
      message(FATAL_ERROR "${label}, ${p} ranks: printed\n[${got}]\nkappa-generate printed\n[${want}]")
    endif()
    if(NOT err MATCHES "ranks: ${p} x [0-9]+ threads .*allreduce payload: [0-9]+ bytes per token")
      message(FATAL_ERROR "${label}, ${p} ranks: no summary line on stderr: ${err}")
    endif()
    if(p GREATER 1 AND NOT err MATCHES "bytes per token \\(${per_layer} per layer\\)")
      message(FATAL_ERROR "${label}, ${p} ranks: not ${per_layer} bytes per layer: ${err}")
    endif()
  endforeach()
endfunction()

expect_same("greedy" MODEL llama D 32 ARGS --prompt "the cat sat on" --max-new-tokens 10)
expect_same("sampled" MODEL llama D 32 ARGS --prompt "the cat sat on" --max-new-tokens 10
            --temperature 0.8 --seed 5)
expect_same("latent attention and experts, sampled" MODEL deepseek_v2-moe D 32
            ARGS --prompt "the cat sat on" --max-new-tokens 10 --temperature 0.8 --seed 5)
expect_same("experts, greedy" MODEL mixtral D 32 ARGS --prompt "the cat sat on" --max-new-tokens 10)
expect_same("experts by columns, sampled" MODEL deepseek_v3 D 32
            ARGS --prompt "the cat sat on" --max-new-tokens 10 --temperature 0.8 --seed 5
            MPI_ARGS --experts columns)
expect_same("sliding and global layers, greedy" MODEL gemma2 D 32
            ARGS --prompt "the cat sat on" --max-new-tokens 10)
expect_same("fused projections and a window, sampled" MODEL phi3 D 64
            ARGS --prompt "the cat sat on" --max-new-tokens 10 --temperature 0.8 --seed 5)
expect_same("a GGUF file, sampled" MODEL llama-gguf/llama-f32.gguf D 32
            ARGS --prompt "the cat sat on" --max-new-tokens 10 --temperature 0.8 --seed 5)
# --bf16 against kappa-generate --bf16 (both round the same weights to bfloat16)
expect_same("bfloat16 shares, greedy" MODEL llama D 32
            ARGS --prompt "the cat sat on" --max-new-tokens 10 --bf16)
