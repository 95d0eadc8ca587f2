#!/usr/bin/env python3
"""Writes the corrupted Hugging Face tokenizer directories under this folder.

Each case is a directory holding a tokenizer.json (or vocab.json + merges.txt)
and perhaps a tokenizer_config.json, one of them broken, and expect.txt: the
file the FormatError must name, then substrings the message must contain.
tests/tokenize/hf_tokenizer_test.cpp loads every directory with
HfTokenizer::from_directory. Run this script from anywhere to regenerate.
"""
import copy
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))


def byte_alphabet():
    printable = [b for b in range(256)
                 if ord('!') <= b <= ord('~') or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(0x100 + extra)
            extra += 1
    return out


ALPHA = byte_alphabet()


def enc(s):
    return ''.join(ALPHA[b] for b in s.encode('utf-8'))


def base():
    vocab = {ALPHA[b]: b for b in range(256)}
    vocab['ab'] = 256
    vocab['abc'] = 257
    return {
        'version': '1.0',
        'added_tokens': [{'id': 258, 'content': '<s>', 'single_word': False, 'lstrip': False,
                          'rstrip': False, 'normalized': False, 'special': True}],
        'normalizer': None,
        'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True,
                          'use_regex': True},
        'post_processor': {'type': 'ByteLevel', 'trim_offsets': False},
        'decoder': {'type': 'ByteLevel'},
        'model': {'type': 'BPE', 'dropout': None, 'unk_token': None, 'ignore_merges': False,
                  'vocab': vocab, 'merges': ['a b', 'ab c']},
    }


CASES = {}


def case(name, expect, tokenizer=None, config=None, raw_tokenizer=None, raw_config=None,
         files=None):
    CASES[name] = (expect, tokenizer, config, raw_tokenizer, raw_config, files)


def edit(f):
    t = base()
    f(t)
    return t


def seq_split(regex, behavior='Isolated'):
    return {'type': 'Sequence', 'pretokenizers': [
        {'type': 'Split', 'pattern': {'Regex': regex}, 'behavior': behavior, 'invert': False},
        {'type': 'ByteLevel', 'add_prefix_space': False, 'use_regex': False}]}


T = 'tokenizer.json'
C = 'tokenizer_config.json'

# JSON itself
case('malformed_json', [T, 'not valid JSON', ': byte '], raw_tokenizer=json.dumps(base())[:200])
case('empty_file', [T, 'not valid JSON'], raw_tokenizer='')
case('not_an_object', [T, 'expected a JSON object'], raw_tokenizer='[1, 2, 3]')
case('deeply_nested', [T, 'nested deeper than 128 levels'], raw_tokenizer='[' * 100000 + ']' * 100000)
case('number_beyond_double', [T, 'not valid JSON'],
     raw_tokenizer=json.dumps(base()).replace('"dropout": null', '"dropout": 1e400'))
case('config_number_beyond_double', [C, 'not valid JSON'], base(),
     raw_config='{"bos_token": "<s>", "model_max_length": 1e400}')
case('trailing_garbage', [T, 'not valid JSON'], raw_tokenizer=json.dumps(base()) + ' }')
# model
# WordPiece and Unigram files go to their own readers, which name what they
# do not accept of a byte-level file.
case('wordpiece', [T, 'pre_tokenizer.type', '"ByteLevel" is not supported'],
     edit(lambda t: t['model'].update(type='WordPiece')))
case('unigram', [T, 'model.vocab', 'not an array'],
     edit(lambda t: t['model'].update(type='Unigram')))
case('wordlevel', [T, 'model.type', '"WordLevel" is not supported'],
     edit(lambda t: t['model'].update(type='WordLevel')))
case('missing_model', [T, 'missing key "model"'], edit(lambda t: t.pop('model')))
case('model_not_object', [T, 'model: expected an object'], edit(lambda t: t.update(model=[])))
case('missing_vocab', [T, 'model: missing key "vocab"'], edit(lambda t: t['model'].pop('vocab')))
case('missing_merges', [T, 'model: missing key "merges"'],
     edit(lambda t: t['model'].pop('merges')))
case('vocab_not_object', [T, 'model.vocab: expected an object'],
     edit(lambda t: t['model'].update(vocab=[1, 2])))
case('negative_id', [T, 'model.vocab["ab"]', 'negative id -5'],
     edit(lambda t: t['model']['vocab'].update(ab=-5)))
case('duplicate_id', [T, 'model.vocab', 'duplicate id 256'],
     edit(lambda t: t['model']['vocab'].update(abc=256)))
case('huge_id', [T, 'model.vocab["ab"]', 'out of range'],
     edit(lambda t: t['model']['vocab'].update(ab=2 ** 63 + 5)))
case('id_far_beyond', [T, 'model.vocab["ab"]', 'far beyond'],
     edit(lambda t: t['model']['vocab'].update(ab=5000000)))
case('float_id', [T, 'model.vocab["ab"]', 'expected an integer id'],
     edit(lambda t: t['model']['vocab'].update(ab=1.5)))
case('string_id', [T, 'model.vocab["ab"]', 'expected an integer id'],
     edit(lambda t: t['model']['vocab'].update(ab='256')))
case('missing_byte', [T, 'single byte 0x41'], edit(lambda t: t['model']['vocab'].pop('A')))
case('outside_alphabet', [T, 'model.vocab', "outside GPT-2's byte alphabet"],
     edit(lambda t: t['model']['vocab'].update({'a b': 300})))
case('merge_unknown_token', [T, 'model.merges[1]', 'token "abx" is not in the vocabulary'],
     edit(lambda t: t['model'].update(merges=['a b', 'ab x'])))
case('merge_result_missing', [T, 'model.merges[1]', 'token "bc" is not in the vocabulary'],
     edit(lambda t: t['model'].update(merges=['a b', 'b c'])))
case('merge_no_space', [T, 'model.merges[0]', 'expected "<token> <token>"'],
     edit(lambda t: t['model'].update(merges=['ab', 'ab c'])))
case('merge_three_parts', [T, 'model.merges[1]', 'expected "<token> <token>"'],
     edit(lambda t: t['model'].update(merges=['a b', 'a b c'])))
case('merge_bad_pair', [T, 'model.merges[0]', 'expected a pair'],
     edit(lambda t: t['model'].update(merges=[[1, 2]])))
case('merge_number', [T, 'model.merges[0]', 'expected a string or a pair'],
     edit(lambda t: t['model'].update(merges=[7])))
case('merges_not_array', [T, 'model.merges: expected an array'],
     edit(lambda t: t['model'].update(merges='a b')))
case('dropout', [T, 'model.dropout', 'not supported'],
     edit(lambda t: t['model'].update(dropout=0.1)))
case('subword_prefix', [T, 'model.continuing_subword_prefix', 'not supported'],
     edit(lambda t: t['model'].update(continuing_subword_prefix='##')))
case('ignore_merges_string', [T, 'model.ignore_merges', 'expected true or false'],
     edit(lambda t: t['model'].update(ignore_merges='yes')))
# normalizer, pre-tokenizer, decoder, post-processor
case('normalizer_nfkc', [T, 'normalizer', '"NFKC" is not supported'],
     edit(lambda t: t.update(normalizer={'type': 'NFKC'})))
case('normalizer_sequence', [T, 'normalizer', '"Sequence [Prepend, Replace]"'],
     edit(lambda t: t.update(normalizer={'type': 'Sequence', 'normalizers': [
         {'type': 'Prepend', 'prepend': '\u2581'},
         {'type': 'Replace', 'pattern': {'String': ' '}, 'content': '\u2581'}]})))
# A null or Metaspace pre-tokenizer selects the SentencePiece-style layout,
# where GPT-2's ByteLevel decoder has no place.
case('pre_tokenizer_metaspace', [T, 'decoder.type', '"ByteLevel" is not supported with a SentencePiece'],
     edit(lambda t: t.update(pre_tokenizer={'type': 'Metaspace', 'replacement': '\u2581'})))
case('pre_tokenizer_null', [T, 'decoder.type', '"ByteLevel" is not supported with a SentencePiece'],
     edit(lambda t: t.update(pre_tokenizer=None)))


def sp(f):
    def g(t):
        t.update(pre_tokenizer={'type': 'Metaspace', 'replacement': '\u2581',
                                'prepend_scheme': 'first', 'split': False},
                 decoder={'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': 'first'})
        t['model'].update(byte_fallback=True, fuse_unk=True)
        f(t)
    return edit(g)


case('sp_prepend_scheme', [T, 'pre_tokenizer.prepend_scheme', '"sometimes" is not one of'],
     sp(lambda t: t['pre_tokenizer'].update(prepend_scheme='sometimes')))
case('sp_replacement_two_chars', [T, 'pre_tokenizer.replacement', 'expected one character'],
     sp(lambda t: t['pre_tokenizer'].update(replacement='ab')))
case('sp_normalizer_regex', [T, 'normalizer.normalizers[0].pattern', 'only a String pattern'],
     sp(lambda t: t.update(normalizer={'type': 'Sequence', 'normalizers': [
         {'type': 'Replace', 'pattern': {'Regex': ' +'}, 'content': '\u2581'}]})))
case('sp_normalizer_nfkc', [T, 'normalizer.type', '"NFKC" is not supported'],
     sp(lambda t: t.update(normalizer={'type': 'NFKC'})))
case('sp_decoder_wordpiece', [T, 'decoder.decoders[1].type', '"WordPiece" is not supported'],
     sp(lambda t: t.update(decoder={'type': 'Sequence', 'decoders': [
         {'type': 'ByteFallback'}, {'type': 'WordPiece', 'prefix': '##'}]})))
case('sp_strip_count', [T, 'decoder.stop', 'expected a count'],
     sp(lambda t: t.update(decoder={'type': 'Strip', 'content': ' ', 'start': 1, 'stop': -1})))
case('sp_unk_missing', [T, 'model.unk_token: "<unk>" is not in the vocabulary'],
     sp(lambda t: t['model'].update(unk_token='<unk>')))
case('sp_merge_unknown', [T, 'model.merges[2]', 'is not in the vocabulary'],
     sp(lambda t: t['model']['merges'].append('x\u2581 y')))
case('pre_tokenizer_no_regex', [T, 'pre_tokenizer.use_regex', 'not supported'],
     edit(lambda t: t['pre_tokenizer'].update(use_regex=False)))
case('unknown_pattern', [T, 'pre_tokenizer.pretokenizers[0].pattern.Regex',
                         'unknown split pattern', '"...'],
     edit(lambda t: t.update(pre_tokenizer=seq_split(
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"))))
case('split_removed', [T, 'pre_tokenizer.pretokenizers[0].behavior', '"Removed" is not supported'],
     edit(lambda t: t.update(pre_tokenizer=seq_split(
         r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", 'Removed'))))
case('split_string_pattern', [T, 'pre_tokenizer.pretokenizers[0].pattern', 'only a Regex'],
     edit(lambda t: t.update(pre_tokenizer={'type': 'Sequence', 'pretokenizers': [
         {'type': 'Split', 'pattern': {'String': ' '}, 'behavior': 'Isolated', 'invert': False},
         {'type': 'ByteLevel', 'use_regex': False}]})))
case('three_pretokenizers', [T, 'pre_tokenizer.pretokenizers', '3 entries', '"Split", "Split", "ByteLevel"'],
     edit(lambda t: t.update(pre_tokenizer={'type': 'Sequence', 'pretokenizers': [
         {'type': 'Split', 'pattern': {'Regex': '[\r\n]'}, 'behavior': 'Isolated', 'invert': False},
         {'type': 'Split', 'pattern': {'Regex': r'\p{N}+'}, 'behavior': 'Isolated', 'invert': False},
         {'type': 'ByteLevel', 'use_regex': False}]})))
case('decoder_wordpiece', [T, 'decoder.type', '"WordPiece" is not supported'],
     edit(lambda t: t.update(decoder={'type': 'WordPiece', 'prefix': '##'})))
case('post_processor_unknown', [T, 'post_processor.type', '"Weird" is not supported'],
     edit(lambda t: t.update(post_processor={'type': 'Weird'})))
case('template_missing_special', [T, 'post_processor.special_tokens', 'missing the entry "<bos>"'],
     edit(lambda t: t.update(post_processor={'type': 'TemplateProcessing', 'single': [
         {'SpecialToken': {'id': '<bos>', 'type_id': 0}}, {'Sequence': {'id': 'A', 'type_id': 0}}],
         'special_tokens': {}})))
case('template_bad_id', [T, 'post_processor.special_tokens["<s>"].ids[0]', 'id 9999 is not a token'],
     edit(lambda t: t.update(post_processor={'type': 'TemplateProcessing', 'single': [
         {'SpecialToken': {'id': '<s>', 'type_id': 0}}, {'Sequence': {'id': 'A', 'type_id': 0}}],
         'special_tokens': {'<s>': {'id': '<s>', 'ids': [9999], 'tokens': ['<s>']}}})))
case('template_no_sequence', [T, 'post_processor.single', 'has no'],
     edit(lambda t: t.update(post_processor={'type': 'TemplateProcessing', 'single': [
         {'SpecialToken': {'id': '<s>', 'type_id': 0}}],
         'special_tokens': {'<s>': {'id': '<s>', 'ids': [258], 'tokens': ['<s>']}}})))
# added tokens
case('added_not_array', [T, 'added_tokens: expected an array'],
     edit(lambda t: t.update(added_tokens={'id': 1})))
case('added_not_object', [T, 'added_tokens[0]: expected an object'],
     edit(lambda t: t.update(added_tokens=['<s>'])))
case('added_missing_id', [T, 'added_tokens[0]: missing key "id"'],
     edit(lambda t: t['added_tokens'][0].pop('id')))
case('added_negative_id', [T, 'added_tokens[0].id', 'negative id -1'],
     edit(lambda t: t['added_tokens'][0].update(id=-1)))
case('added_duplicate_id', [T, 'added_tokens[1].id', 'duplicate id 258'],
     edit(lambda t: t['added_tokens'].append({'id': 258, 'content': '</s>', 'special': True})))
case('added_duplicate_content', [T, 'added_tokens[1].content', 'duplicate token "<s>"'],
     edit(lambda t: t['added_tokens'].append({'id': 259, 'content': '<s>', 'special': True})))
case('added_empty', [T, 'added_tokens[0].content', 'empty token'],
     edit(lambda t: t['added_tokens'][0].update(content='')))
case('added_far_id', [T, 'added_tokens[0].id', 'far beyond'],
     edit(lambda t: t['added_tokens'][0].update(id=100000000)))
case('added_reuses_vocab_id', [T, 'model.vocab["ab"]', 'also added token "<s>"'],
     edit(lambda t: t['added_tokens'][0].update(id=256)))
case('added_single_word_string', [T, 'added_tokens[0].single_word', 'expected true or false'],
     edit(lambda t: t['added_tokens'][0].update(single_word='yes')))
case('added_normalized_number', [T, 'added_tokens[0].normalized', 'expected true or false'],
     edit(lambda t: t['added_tokens'][0].update(normalized=1)))
case('added_special_string', [T, 'added_tokens[0].special', 'expected true or false'],
     edit(lambda t: t['added_tokens'][0].update(special='true')))
# tokenizer_config.json
case('config_malformed', [C, 'not valid JSON'], base(), raw_config='{"bos_token": "<s>",')
case('config_not_object', [C, 'expected a JSON object'], base(), raw_config='"<s>"')
case('config_bos_unknown', [C, 'bos_token', '"<bos>" is not a token'], base(),
     config={'bos_token': '<bos>'})
case('config_bos_number', [C, 'bos_token', 'expected a string'], base(),
     config={'bos_token': 5})
case('config_eos_object_without_content', [C, 'eos_token: missing key "content"'], base(),
     config={'eos_token': {'special': True}})
case('config_add_bos_string', [C, 'add_bos_token', 'expected true or false'], base(),
     config={'bos_token': '<s>', 'add_bos_token': 'yes'})
case('config_add_bos_without_bos', [C, 'add_bos_token', 'no bos_token'], base(),
     config={'add_bos_token': True})
# GPT-2's layout
gpt2_vocab = {ALPHA[b]: b for b in range(256)}
gpt2_vocab['ab'] = 256
case('gpt2_bad_merge_line', ['merges.txt', 'line 3', 'expected "<token> <token>"'],
     files={'vocab.json': json.dumps(gpt2_vocab), 'merges.txt': '#version: 0.2\na b\nabc\n'})
case('gpt2_merge_unknown', ['merges.txt', 'line 2', 'token "abx" is not in the vocabulary'],
     files={'vocab.json': json.dumps(gpt2_vocab), 'merges.txt': '#version: 0.2\nab x\n'})
case('gpt2_vocab_malformed', ['vocab.json', 'not valid JSON'],
     files={'vocab.json': '{"a": 1', 'merges.txt': ''})
case('gpt2_vocab_negative', ['vocab.json', '"ab"', 'negative id'],
     files={'vocab.json': json.dumps(dict(gpt2_vocab, ab=-3)), 'merges.txt': ''})


def main():
    for entry in os.listdir(HERE):
        if os.path.isdir(os.path.join(HERE, entry)):
            shutil.rmtree(os.path.join(HERE, entry))
    for name, (expect, tok, config, raw_tok, raw_config, files) in sorted(CASES.items()):
        d = os.path.join(HERE, name)
        os.makedirs(d)

        def put(fname, text):
            with open(os.path.join(d, fname), 'w', encoding='utf-8', newline='\n') as f:
                f.write(text)

        if files:
            for fname, text in files.items():
                put(fname, text)
        if raw_tok is not None:
            put(T, raw_tok)
        elif tok is not None:
            put(T, json.dumps(tok, ensure_ascii=False))
        if raw_config is not None:
            put(C, raw_config)
        elif config is not None:
            put(C, json.dumps(config, ensure_ascii=False))
        put('expect.txt', '\n'.join(expect) + '\n')


if __name__ == '__main__':
    main()
