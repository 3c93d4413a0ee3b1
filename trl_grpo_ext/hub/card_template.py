"""The fixed text of the model card: its Jinja template and the BibTeX of the methods a run uses.

:func:`trl_grpo_ext.hub.card.build_model_card` fills the template's placeholders from the run's files; nothing here
is computed.
"""

#: BibTeX of the methods every run uses: GRPO (as TRL's GRPOTrainer cites it) and TRL (as TRL's cards do). The
#: adapter method is cited by the card according to the run: QLoRA for a 4-bit base, else LoRA (`card_facts`).
CITATIONS = (
    """@article{shao2024deepseekmath,
    title        = {{DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models}},
    author       = {Zhihong Shao and Peiyi Wang and Qihao Zhu and Runxin Xu and Junxiao Song and Mingchuan Zhang and Y. K. Li and Y. Wu and Daya Guo},
    year         = 2024,
    eprint       = {arXiv:2402.03300},
}""",
    """@software{vonwerra2020trl,
    title        = {{TRL: Transformers Reinforcement Learning}},
    author       = {von Werra, Leandro and Belkada, Younes and Tunstall, Lewis and Beeching, Edward and Thrush, Tristan and Lambert, Nathan and Huang, Shengyi and Rasul, Kashif and Gallouédec, Quentin},
    license      = {Apache-2.0},
    url          = {https://github.com/huggingface/trl},
    year         = {2020}
}""",
)
#: Cited for a run on a 4-bit base.
QLORA_CITATION = """@article{dettmers2023qlora,
    title        = {{QLoRA: Efficient Finetuning of Quantized LLMs}},
    author       = {Tim Dettmers and Artidoro Pagnoni and Ari Holtzman and Luke Zettlemoyer},
    year         = 2023,
    eprint       = {arXiv:2305.14314},
}"""
#: Cited for a LoRA run whose base was not 4-bit.
LORA_CITATION = """@inproceedings{hu2022lora,
    title        = {{LoRA: Low-Rank Adaptation of Large Language Models}},
    author       = {Edward J. Hu and Yelong Shen and Phillip Wallis and Zeyuan Allen-Zhu and Yuanzhi Li and Shean Wang and Lu Wang and Weizhu Chen},
    booktitle    = {International Conference on Learning Representations},
    year         = 2022,
    eprint       = {arXiv:2106.09685},
}"""
#: Added when the run filters zero-variance groups (DAPO's dynamic sampling).
DAPO_CITATION = """@article{yu2025dapo,
    title        = {{DAPO: An Open-Source LLM Reinforcement Learning System at Scale}},
    author       = {Qiying Yu and others},
    year         = 2025,
    eprint       = {arXiv:2503.14476},
}"""

GRESO_CITATION = """@article{zheng2025greso,
    title        = {{Act Only When It Pays: Efficient Reinforcement Learning for LLM Reasoning via Selective Rollouts}},
    author       = {Haizhong Zheng and Yang Zhou and Brian R. Bartoldson and Bhavya Kailkhura and Fan Lai and Jiawei Zhao
                    and Beidi Chen},
    year         = 2025,
    eprint       = {arXiv:2506.02177},
}"""

CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ model_name }}

{{ summary }}

## How to load

{{ load_section }}

## Training procedure

Trained with trl-grpo-ext, an add-on to [TRL](https://github.com/huggingface/trl)'s `GRPOTrainer`: Group Relative
Policy Optimization ([Shao et al., 2024](https://huggingface.co/papers/2402.03300)) {{ training_sentence }}

### Reward functions

{{ rewards_table }}

### Quantity plan

Every derived quantity of the run, as resolved before training (`run_plan.json`).

{{ plan_table }}

### Zero-variance filter and advantages

{{ filter_table }}

### Optimisation

{{ optimisation_table }}

### Final metrics

{{ metrics_table }}

## Evaluation

{{ eval_section }}
{% if has_plot %}
### Reward curve

![Mean reward per optimizer step]({{ plot_file }})
{% endif %}
### Framework versions

{{ versions }}

## License

`{{ license }}`. The base model's own license terms apply to these weights as well.

## Citations

```bibtex
{{ citations }}
```

### Full configuration

<details>
<summary>run_config.json (secrets redacted)</summary>

```json
{{ config_json }}
```

</details>
"""
