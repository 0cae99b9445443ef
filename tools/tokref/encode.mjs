// tools/tokref/encode.mjs — the reference for emmy's tokenizer test: Hugging Face's own tokenizers.js
// (@huggingface/tokenizers, from the npm registry) encodes each string of a JSON array with a model's
// tokenizer.json (and tokenizer_config.json where there is one), adding the post-processor's special tokens.
//   node encode.mjs TOKENIZER_DIR CORPUS.json OUT.json  ->  a JSON array of id arrays in OUT.json
import { readFileSync, existsSync, writeFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [dir, corpusPath, outPath] = process.argv.slice(2);
const json = JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8"));
const cfgPath = `${dir}/tokenizer_config.json`;
const cfg = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : {};
const tok = new Tokenizer(json, cfg);
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
writeFileSync(outPath, JSON.stringify(corpus.map((s) => tok.encode(s).ids)));
