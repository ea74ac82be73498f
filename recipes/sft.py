"""Supervised fine-tuning of a terminal agent on multi-turn agent chats.

    accelerate launch [--config_file configs/accelerate/zero3.yaml] recipes/sft.py [--config configs/sft/X.yaml] [--key value ...]

With no --config it trains the embedded default (configs/sft/tiny.yaml): a tiny Qwen3 built offline, the
sample corpora in data/, CPU, W&B offline. The loss covers every assistant turn and nothing else; records
longer than max_length are truncated by whole turns or dropped, and counted; a run resumes from the last
complete checkpoint in output_dir; every checkpoint is evaluated on `eval_suites` (eval/), scores logged to W&B.
"""

import time

RECIPE_STARTED = time.time()  # before the heavy imports below: seconds_to_first_step counts them


from accelerate import PartialState
from trl import ModelConfig, SFTConfig, get_peft_config

import modeling.varlen_attention  # noqa: F401  (registers attn_implementation "varlen" and "varlen_sdpa")
from chat_corpus.cache import corpus_cache_report, prepare_main_first
from chat_corpus.masking import load_tokenizer
from chat_corpus.sft_corpus import CorpusArguments
from common.build_locks import clear_stale_build_locks
from common.checkpoints import last_complete_checkpoint
from modeling.kernels import check_kernels
from modeling.tiny_model import resolve_model
from trainers.eval_callback import EvalArguments, EvalOnSaveCallback
from trainers.recipe_config import DEFAULT_SFT_CONFIG, exit_on_user_error, parse_config
from trainers.summary import build_sft_summary, print_sft_summary, write_summary
from trainers.token_accounting import CountingSFTTrainer


@exit_on_user_error
def main():
    corpus_args, training_args, model_args, eval_args = parse_config(
        (CorpusArguments, SFTConfig, ModelConfig, EvalArguments), DEFAULT_SFT_CONFIG)
    state = PartialState()
    clear_stale_build_locks()  # a run killed while DeepSpeed built an op left its lock: every start would wait on it

    with state.main_process_first():  # the main process builds the tiny model (if asked for) before the others
        model_path = resolve_model(model_args.model_name_or_path)
    # attention for the device; packing on linear-attention layers and Liger refused where they would go wrong
    check_kernels(model_path, model_args.model_revision, training_args, model_args)
    tokenizer = load_tokenizer(model_path, model_args.model_revision, training_args.chat_template_path)
    # the main process prepares the corpus (or finds it in the cache) while the others wait, then they load it
    preparing = time.monotonic()
    prepared = prepare_main_first(corpus_args, tokenizer, training_args.max_length, training_args.dataset_num_proc, state)
    corpus, corpus_cache = prepared.corpus, corpus_cache_report(prepared, preparing)

    training_args.model_init_kwargs = {"revision": model_args.model_revision, "dtype": model_args.dtype,
                                       "attn_implementation": model_args.attn_implementation,
                                       **(training_args.model_init_kwargs or {})}
    trainer = CountingSFTTrainer(model=model_path, args=training_args, train_dataset=corpus.train, eval_dataset=corpus.eval,
                         processing_class=tokenizer, peft_config=get_peft_config(model_args),
                         callbacks=[EvalOnSaveCallback(eval_args)] if eval_args.eval_suites else None)

    resume = training_args.resume_from_checkpoint or last_complete_checkpoint(training_args.output_dir)
    started = time.monotonic()
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model()

    first_step = trainer.token_counts.first_step_at  # None when a resumed run had no step left
    summary = build_sft_summary(trainer, corpus, trainer.token_counts.totals(trainer.accelerator), time.monotonic() - started, resume,
                                corpus_cache, first_step - RECIPE_STARTED if first_step else None)
    if trainer.is_world_process_zero():
        print_sft_summary(summary)
        write_summary(summary)
    trainer.end()


if __name__ == "__main__":
    main()
