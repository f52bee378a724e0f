// kvlab.tokenizer: the tokenizers of Llama-family models, so text can go in and out of a model.
//   vocabulary, tokenizer       -> encode(text, add_bos) / decode(ids) (SentencePiece BPE, llama2.c, GPT-2 byte-level
//   BPE) load_llama2c_tokenizer      -> llama2.c's tokenizer.bin load_hf_tokenizer           -> Hugging Face
//   tokenizer.json (BPE) with tokenizer_config.json
// GGUF vocabularies are read by kvlab.tokenizer.gguf, so this module does not depend on the GGUF reader.
export module kvlab.tokenizer;
export import :core;
export import :files;
