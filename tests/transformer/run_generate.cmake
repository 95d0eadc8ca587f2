cmake_minimum_required(VERSION 3.25)
# Runs the generate command on the tiny GPT-2 and checks its outputs.
set(model "${SOURCE_DIR}/tests/data/models/gpt2")

function(expect_match text regex what)
  if(NOT "${text}" MATCHES "${regex}")
    message(FATAL_ERROR "generate: ${what}: expected /${regex}/ in:\n${text}")
  endif()
endfunction()

# 1. --json with greedy decoding: the prompt ids are those of the independent
#    Python BPE (tests/data/models/gpt2/reference/tokens.json, first text).
file(READ "${model}/reference/tokens.json" tokens_json)
string(JSON text0 GET "${tokens_json}" texts 0)
string(JSON ids0 GET "${tokens_json}" ids 0)
string(REGEX REPLACE "[ \n\t]" "" ids0 "${ids0}")
execute_process(COMMAND "${GENERATE}" --model "${model}" --prompt "${text0}" --max-new-tokens 5
                        --greedy --json --logits "${WORK_DIR}/gen_logits.npy"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generate --json failed (${rc}): ${err}")
endif()
string(JSON prompt_ids GET "${out}" prompt_ids)
string(REGEX REPLACE "[ \n\t]" "" prompt_ids "${prompt_ids}")
if(NOT prompt_ids STREQUAL ids0)
  message(FATAL_ERROR "generate: prompt ids ${prompt_ids}, the reference tokenizer gives ${ids0}")
endif()
string(JSON n_gen LENGTH "${out}" generated_ids)
if(n_gen LESS 1 OR n_gen GREATER 5)
  message(FATAL_ERROR "generate: ${n_gen} generated ids for --max-new-tokens 5: ${out}")
endif()
expect_match("${err}" "prompt: [0-9]+ tokens \\| prefill: [0-9.]+ tokens/s \\| decode: [0-9.]+ tokens/s"
             "the stderr summary")
expect_match("${err}" "weights: [0-9.]+ MB .* cache: [0-9.]+ MB \\| load: [0-9.]+ s" "bytes and load time")
# --logits: float32, (prompt length x 297).
string(JSON n_prompt LENGTH "${out}" prompt_ids)
file(READ "${WORK_DIR}/gen_logits.npy" header OFFSET 10 LIMIT 118)  # after the magic and length
expect_match("${header}" "'descr': '<f4'" "--logits dtype")
expect_match("${header}" "'shape': \\(${n_prompt}, 297\\)" "--logits shape")

# 2. The same seed gives the same sampled ids.
foreach(run a b)
  execute_process(COMMAND "${GENERATE}" --model "${model}" --prompt "the cat" --max-new-tokens 8
                          --temperature 0.9 --top-p 0.95 --seed 11 --json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out_${run} ERROR_QUIET)
  string(JSON gen_${run} GET "${out_${run}}" generated_ids)
endforeach()
if(NOT gen_a STREQUAL gen_b)
  message(FATAL_ERROR "generate: seed 11 gave ${gen_a} then ${gen_b}")
endif()

# 3. Errors: one line, non-zero exit.
foreach(case "--model;${SOURCE_DIR}/no/such/dir;--prompt;x"
             "--model;${model};--prompt;x;--top-p;abc"
             "--model;${model};--prompt;x;--temperature;-1"
             "--model;${model};--bogus;1"
             "--prompt;x")
  execute_process(COMMAND "${GENERATE}" ${case} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "generate ${case}: expected a non-zero exit")
  endif()
  string(STRIP "${err}" err)
  string(FIND "${err}" "\n" nl)
  if(NOT nl EQUAL -1 OR NOT err MATCHES "^generate: ")
    message(FATAL_ERROR "generate ${case}: expected one error line, got:\n${err}")
  endif()
endforeach()
# 4. Every family generates from its directory (issue 26); the Qwen
#    tokenizers declare NFC, which kappa applies (tokenize/normalize.hpp).
foreach(family mixtral qwen2_moe deepseek_v2-moe deepseek_v2-lite deepseek_v3 qwen3 phi3
               phi3-longrope gemma2 gemma3_text)
  execute_process(COMMAND "${GENERATE}" --model "${SOURCE_DIR}/tests/data/models/${family}"
                          --prompt "the cat" --max-new-tokens 4 --greedy --json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "generate on ${family} failed (${rc}): ${err}")
  endif()
  string(JSON n_gen LENGTH "${out}" generated_ids)
  if(n_gen LESS 1)
    message(FATAL_ERROR "generate on ${family}: no token generated: ${out}")
  endif()
endforeach()
execute_process(COMMAND "${GENERATE}" --model "${SOURCE_DIR}/tests/data/models/qwen3" --prompt
                        "café näive" --max-new-tokens 2 --greedy --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generate on qwen3 with a non-ASCII prompt failed (${rc}): ${err}")
endif()
# Greedy "Hello world" + 6 tokens on `model`: the prompt ids and the
# generated ids (JSON arrays) into <var>_prompt and <var>_ids.
function(greedy_ids model var)
  execute_process(COMMAND "${GENERATE}" --model "${model}" --prompt "Hello world"
                          --max-new-tokens 6 --greedy --json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "generate on ${model} failed (${rc}): ${err}")
  endif()
  string(JSON p GET "${out}" prompt_ids)
  string(JSON g GET "${out}" generated_ids)
  set(${var}_prompt "${p}" PARENT_SCOPE)
  set(${var}_ids "${g}" PARENT_SCOPE)
endfunction()
# 5. A GGUF file runs as its directory does (issue 27 item 6): the files
#    llama.cpp's converter wrote from the tiny llama, qwen2 and gpt2 give the
#    same prompt ids and greedy ids as the Hugging Face directories.
foreach(pair "llama-f32.gguf|llama" "qwen2-f32.gguf|qwen2" "gpt2-f32.gguf|gpt2")
  string(REPLACE "|" ";" pair "${pair}")
  list(GET pair 0 file)
  list(GET pair 1 dir)
  greedy_ids("${SOURCE_DIR}/tests/data/models/llama-gguf/${file}" gguf)
  greedy_ids("${SOURCE_DIR}/tests/data/models/${dir}" hf)
  if(NOT "${gguf_prompt} ${gguf_ids}" STREQUAL "${hf_prompt} ${hf_ids}")
    message(FATAL_ERROR "${file}: ${gguf_prompt} ${gguf_ids}, its directory ${dir}: "
                        "${hf_prompt} ${hf_ids}")
  endif()
endforeach()
# 6. The round trip (issue 27 items 2 and 6): the quantize command writes the
#    tiny llama and qwen2 as GGUF; in F32 they generate their directories'
#    ids, in Q8_0 and Q4_0 they load, tokenize the same and generate.
foreach(model llama qwen2)
  greedy_ids("${SOURCE_DIR}/tests/data/models/${model}" hf)
  foreach(type f32 q8_0 q4_0)
    set(file "${WORK_DIR}/roundtrip-${model}-${type}.gguf")
    execute_process(COMMAND "${QUANTIZE}" --model "${SOURCE_DIR}/tests/data/models/${model}"
                            --out "${file}" --type ${type}
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "quantize ${model} ${type} failed (${rc}): ${err}")
    endif()
    greedy_ids("${file}" gguf)
    if(NOT gguf_prompt STREQUAL hf_prompt)
      message(FATAL_ERROR "${model} ${type}: prompt ids ${gguf_prompt}, directory ${hf_prompt}")
    endif()
    if(type STREQUAL "f32" AND NOT gguf_ids STREQUAL hf_ids)
      message(FATAL_ERROR "${model} f32 round trip: ${gguf_ids}, directory ${hf_ids}")
    endif()
    file(REMOVE "${file}")
  endforeach()
endforeach()
message(STATUS "generate CLI: OK")
