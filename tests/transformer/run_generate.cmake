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
expect_match("${err}" "weights: [0-9.]+ MB .* cache: [0-9.]+ MB \\(native\\) \\| load: [0-9.]+ s"
             "bytes, the cache's format and load time")
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

# 3. Errors: one line, non-zero exit; a bad command line exits with 2.
function(expect_one_line_error case want_rc)
  execute_process(COMMAND "${GENERATE}" ${case} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(rc EQUAL 0 OR (want_rc AND NOT rc EQUAL want_rc))
    message(FATAL_ERROR "generate ${case}: exit status ${rc}, expected ${want_rc} (non-zero):\n${err}")
  endif()
  string(STRIP "${err}" err)
  string(FIND "${err}" "\n" nl)
  if(NOT nl EQUAL -1 OR NOT err MATCHES "^kappa-generate: ")
    message(FATAL_ERROR "generate ${case}: expected one error line, got:\n${err}")
  endif()
endfunction()
expect_one_line_error("--model;${SOURCE_DIR}/no/such/dir;--prompt;x" 1)
expect_one_line_error("--model;${model};--prompt;x;--weights;${SOURCE_DIR}/no/such.safetensors" 1)
foreach(case "--model;${model};--prompt;x;--top-p;abc"
             "--model;${model};--prompt;x;--temperature;-1"
             "--model;${model};--bogus;1"
             "--prompt;x"
             "--model;${model}"
             "--model;${model};--prompt"
             "--model;${model};--prompt;x;--prompt-ids;1"
             "--model;${model};--prompt-ids;1,x"
             "--model;${model};--prompt-ids;-1"
             "--model;${model};--prompt-ids;,"
             "--model;${model};--prompt-ids;1,999"
             "--model;${model};--prompt;x;--threads;0"
             "--model;${model};--prompt;x;--max-new-tokens;-3"
             "--model;${model};--prompt;x;--reps;3"
             "--model;${model};--bench;--prompt;x"
             "--model;${model};--bench;--bench-prompt;0"
             "--model;${model};--bench;--reps;0"
             "--model;${model};--bench"  # 128 + 64 tokens: beyond the tiny model's 32
             "--model;${SOURCE_DIR}/tests/data/models/llama-gguf/gpt2-f32.gguf;--weights;x;--prompt;x")
  expect_one_line_error("${case}" 2)
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
# 7. --help: every option with a description, grouped, exit 0.
execute_process(COMMAND "${GENERATE}" --help RESULT_VARIABLE rc OUTPUT_VARIABLE help
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generate --help exited with ${rc}: ${err}")
endif()
foreach(group Model Prompt Sampling Output Performance)
  expect_match("${help}" "\n${group}:\n" "--help's group ${group}")
endforeach()
foreach(opt --model --weights --bf16 --mmap --interleave-q4 --no-interleave-q4 --prompt --prompt-ids
            --max-new-tokens --greedy --temperature --top-k --top-p --min-p --repeat-penalty
            --seed --stop --ignore-eos --json --logits
            --threads --bench --bench-prompt --bench-gen --reps --cache-type --logprobs --chat
            --system --num-beams --length-penalty --early-stopping)
  expect_match("${help}" "\n  ${opt}( [A-Za-z|.]+)?( +[a-z]|\n  +[a-z])" "--help's line for ${opt}")
endforeach()
expect_match("${help}" "default 128" "--help's defaults")

# Runs generate with `args` and gives the JSON output's prompt ids, generated
# ids and stop reason as <var>_prompt, <var>_ids, <var>_stop.
function(gen_json var)
  execute_process(COMMAND "${GENERATE}" ${ARGN} --json RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "generate ${ARGN} failed (${rc}): ${err}")
  endif()
  string(JSON p GET "${out}" prompt_ids)
  string(JSON g GET "${out}" generated_ids)
  string(JSON s GET "${out}" stop)
  string(REGEX REPLACE "[ \n\t]" "" p "${p}")
  string(REGEX REPLACE "[ \n\t]" "" g "${g}")
  set(${var}_prompt "${p}" PARENT_SCOPE)
  set(${var}_ids "${g}" PARENT_SCOPE)
  set(${var}_stop "${s}" PARENT_SCOPE)
  set(${var}_err "${err}" PARENT_SCOPE)
endfunction()

# 8. --temperature 0 is greedy decoding (even with sampling options).
gen_json(greedy --model "${model}" --prompt "the cat sat on" --max-new-tokens 8 --greedy)
gen_json(t0 --model "${model}" --prompt "the cat sat on" --max-new-tokens 8 --temperature 0
         --top-k 40 --seed 3)
if(NOT t0_ids STREQUAL greedy_ids)
  message(FATAL_ERROR "--temperature 0 gave ${t0_ids}, --greedy ${greedy_ids}")
endif()

# 9. --prompt-ids: the text prompt's ids, comma or space separated, give the
#    same prompt and the same continuation.
string(REGEX REPLACE "^\\[|\\]$" "" ids_commas "${greedy_prompt}")
string(REPLACE "," " " ids_spaces "${ids_commas}")
foreach(ids "${ids_commas}" "${ids_spaces}")
  gen_json(by_ids --model "${model}" --prompt-ids "${ids}" --max-new-tokens 8)
  if(NOT "${by_ids_prompt} ${by_ids_ids}" STREQUAL "${greedy_prompt} ${greedy_ids}")
    message(FATAL_ERROR "--prompt-ids '${ids}': ${by_ids_prompt} ${by_ids_ids}, the text prompt: "
                        "${greedy_prompt} ${greedy_ids}")
  endif()
endforeach()

# 10. --ignore-eos: the tiny llama continues token 10 with 183 and its EOS 297;
#     with --ignore-eos it goes on to --max-new-tokens.
set(llama "${SOURCE_DIR}/tests/data/models/llama")
gen_json(eos --model "${llama}" --prompt-ids 10 --max-new-tokens 6)
gen_json(no_eos --model "${llama}" --prompt-ids 10 --max-new-tokens 6 --ignore-eos)
if(NOT eos_stop STREQUAL "eos" OR NOT eos_ids STREQUAL "[183,297]")
  message(FATAL_ERROR "the tiny llama on [10]: ${eos_ids}, stop ${eos_stop}; expected [183,297] and eos")
endif()
string(JSON n_no_eos LENGTH "${no_eos_ids}")
if(NOT no_eos_stop STREQUAL "max new tokens" OR NOT n_no_eos EQUAL 6
   OR NOT no_eos_ids MATCHES "^\\[183,297,")
  message(FATAL_ERROR "--ignore-eos: ${no_eos_ids}, stop ${no_eos_stop}")
endif()

# 11. --weights: one of several weight files in a directory, a file or an index
#     outside it; the same ids as the model's own directory.
gen_json(own --model "${llama}" --prompt "Hello world" --max-new-tokens 6)
set(two "${WORK_DIR}/gen_two_weights")
file(REMOVE_RECURSE "${two}")
file(MAKE_DIRECTORY "${two}")
foreach(f config.json generation_config.json tokenizer.json tokenizer_config.json)
  file(COPY_FILE "${llama}/${f}" "${two}/${f}")
endforeach()
file(COPY_FILE "${llama}/model.safetensors" "${two}/llama.safetensors")
file(COPY_FILE "${SOURCE_DIR}/tests/data/models/gpt2/model.safetensors" "${two}/other.safetensors")
expect_one_line_error("--model;${two};--prompt;x" 1)  # neither model.safetensors nor an index
set(sharded "${SOURCE_DIR}/tests/data/models/llama-sharded")
foreach(w "${two}/llama.safetensors" "${llama}/model.safetensors"
          "${sharded}/model.safetensors.index.json")
  gen_json(w --model "${two}" --weights "${w}" --prompt "Hello world" --max-new-tokens 6)
  if(NOT "${w_prompt} ${w_ids}" STREQUAL "${own_prompt} ${own_ids}")
    message(FATAL_ERROR "--weights ${w}: ${w_prompt} ${w_ids}, the directory: ${own_prompt} ${own_ids}")
  endif()
endforeach()
file(REMOVE_RECURSE "${two}")

# 12. --bench: prefill and decode tokens/s as a table and as JSON.
execute_process(COMMAND "${GENERATE}" --model "${model}" --bench --bench-prompt 8 --bench-gen 4
                        --reps 2 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generate --bench failed (${rc}): ${err}")
endif()
expect_match("${out}" "tokens/s \\(median\\)" "--bench's table header")
expect_match("${out}" "\\| prefill +\\| +8 \\| +[0-9]+\\.[0-9]+ \\|" "--bench's prefill row")
expect_match("${out}" "\\| decode +\\| +4 \\| +[0-9]+\\.[0-9]+ \\|" "--bench's decode row")
execute_process(COMMAND "${GENERATE}" --model "${model}" --bench --bench-prompt 8 --bench-gen 4
                        --reps 3 --json RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generate --bench --json failed (${rc}): ${err}")
endif()
foreach(what prefill decode)
  string(JSON median GET "${out}" ${what}_tokens_per_second median)
  string(JSON n_runs LENGTH "${out}" ${what}_tokens_per_second runs)
  if(NOT median GREATER 0 OR NOT n_runs EQUAL 3)
    message(FATAL_ERROR "generate --bench --json: ${what} median ${median}, ${n_runs} runs: ${out}")
  endif()
endforeach()

# 13. --threads 2: used with OpenMP, else a warning on stderr (not silently 1).
gen_json(threads --model "${model}" --prompt x --max-new-tokens 1 --threads 2)
if(NOT threads_err MATCHES "threads: 2\n" AND NOT threads_err MATCHES
                                               "warning: --threads 2 has no effect: this build has no OpenMP")
  message(FATAL_ERROR "--threads 2: neither used nor warned about:\n${threads_err}")
endif()
# 14. --cache-type: the tiny llama's greedy ids with an F16 cache are the
#     float cache's (its margins exceed F16's error); every format runs and
#     the summary names it; a bad name is exit 2.
set(llama "${SOURCE_DIR}/tests/data/models/llama")
gen_json(f32 --model "${llama}" --prompt "Hello world" --max-new-tokens 6 --ignore-eos)
foreach(type f16 bf16 int8)
  gen_json(c --model "${llama}" --prompt "Hello world" --max-new-tokens 6 --ignore-eos
           --cache-type ${type})
  expect_match("${c_err}" "cache: [0-9.]+ MB \\(${type}\\)" "--cache-type ${type} in the summary")
  if(type STREQUAL "f16" AND NOT c_ids STREQUAL f32_ids)
    message(FATAL_ERROR "--cache-type f16: ${c_ids}, the float cache ${f32_ids}")
  endif()
endforeach()
expect_one_line_error("--model;${llama};--prompt;x;--cache-type;fp8" 2)

# 15. --logprobs N (with --json): one entry per generated id, the chosen id's
#     log-probability <= 0 and equal to its entry among the top N when greedy.
execute_process(COMMAND "${GENERATE}" --model "${llama}" --prompt "Hello world" --max-new-tokens 4
                        --ignore-eos --greedy --json --logprobs 3
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generate --logprobs failed (${rc}): ${err}")
endif()
string(JSON n_lp LENGTH "${out}" logprobs)
if(NOT n_lp EQUAL 4)
  message(FATAL_ERROR "--logprobs: ${n_lp} entries for 4 tokens: ${out}")
endif()
foreach(i RANGE 3)
  string(JSON id GET "${out}" logprobs ${i} id)
  string(JSON gen GET "${out}" generated_ids ${i})
  string(JSON lp GET "${out}" logprobs ${i} logprob)
  string(JSON n_top LENGTH "${out}" logprobs ${i} top)
  string(JSON top_id GET "${out}" logprobs ${i} top 0 id)
  string(JSON top_lp GET "${out}" logprobs ${i} top 0 logprob)
  if(NOT id EQUAL gen OR NOT top_id EQUAL gen OR NOT lp STREQUAL top_lp OR NOT n_top EQUAL 3
     OR NOT lp MATCHES "^-")
    message(FATAL_ERROR "--logprobs entry ${i}: id ${id} (generated ${gen}), logprob ${lp}, "
                        "top ${top_id} ${top_lp} of ${n_top}")
  endif()
endforeach()
expect_one_line_error("--model;${llama};--prompt;x;--logprobs;2" 2)  # needs --json

# 16. --chat: the tiny qwen2 with ChatML (tests/data/chat_templates) gives the
#     ids of the ChatML text written out by hand.
set(chat_dir "${WORK_DIR}/qwen2-chat")
file(REMOVE_RECURSE "${chat_dir}")
file(COPY "${SOURCE_DIR}/tests/data/models/qwen2/" DESTINATION "${chat_dir}")
file(READ "${chat_dir}/tokenizer_config.json" config)
file(READ "${SOURCE_DIR}/tests/data/chat_templates/chatml.jinja" chatml)
string(REGEX REPLACE "\n$" "" chatml "${chatml}")  # as a JSON string: no quotes or
string(REPLACE "\n" "\\n" chatml "${chatml}")        # backslashes in it, newlines escaped
string(JSON config SET "${config}" chat_template "\"${chatml}\"")
file(WRITE "${chat_dir}/tokenizer_config.json" "${config}")
gen_json(chat --model "${chat_dir}" --chat --system "Be brief." --prompt "Hi there"
         --max-new-tokens 2)
set(im_start "<|im_start|>")
set(im_end "<|im_end|>")
gen_json(byhand --model "${chat_dir}"
         --prompt "${im_start}system\nBe brief.${im_end}\n${im_start}user\nHi there${im_end}\n${im_start}assistant\n"
         --max-new-tokens 2)
if(NOT chat_prompt STREQUAL byhand_prompt)
  message(FATAL_ERROR "--chat: prompt ids ${chat_prompt}, the ChatML text's ${byhand_prompt}")
endif()
expect_one_line_error("--model;${llama};--prompt;x;--chat" 1)  # no chat_template
expect_one_line_error("--model;${llama};--prompt-ids;1,2;--chat" 2)
file(REMOVE_RECURSE "${chat_dir}")
# 17. --num-beams: the best sequence of Hugging Face's beam search
#     (tests/data/beam/golden.json, the case of the prompt [10] with 3 beams).
file(READ "${SOURCE_DIR}/tests/data/beam/golden.json" beam_golden)
string(JSON n_cases LENGTH "${beam_golden}")
math(EXPR last "${n_cases} - 1")
set(beam_want "")
foreach(i RANGE ${last})
  string(JSON p GET "${beam_golden}" ${i} prompt)
  string(JSON b GET "${beam_golden}" ${i} num_beams)
  string(JSON e GET "${beam_golden}" ${i} early_stopping)
  string(JSON l GET "${beam_golden}" ${i} length_penalty)
  string(REGEX REPLACE "[ \n\t]" "" p "${p}")
  if(p STREQUAL "[10]" AND b EQUAL 3 AND e STREQUAL "False" AND l EQUAL 1)
    string(JSON beam_want GET "${beam_golden}" ${i} results 0 ids)
    string(REGEX REPLACE "[ \n\t]" "" beam_want "${beam_want}")
  endif()
endforeach()
if(beam_want STREQUAL "")
  message(FATAL_ERROR "tests/data/beam/golden.json has no case of the prompt [10] with 3 beams")
endif()
gen_json(beam --model "${llama}" --prompt-ids 10 --num-beams 3 --max-new-tokens 6)
if(NOT beam_ids STREQUAL beam_want)
  message(FATAL_ERROR "--num-beams 3: ${beam_ids}, Hugging Face's beam search ${beam_want}")
endif()
expect_one_line_error("--model;${llama};--prompt;x;--num-beams;2;--seed;1" 2)
expect_one_line_error("--model;${llama};--prompt;x;--early-stopping;true" 2)
message(STATUS "generate CLI: OK")
