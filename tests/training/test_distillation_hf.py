"""training.distill with a Hugging Face directory for teacher, read as training.init_from reads one (apart from
test_distillation.py because these tests need the optional transformers package)."""

from tests.training import test_hf_finetune as hf
from tests.training.test_distillation import records

hf_t5_dir, shared_data_dir = hf.hf_t5_dir, hf.shared_data_dir  # fixtures: a tiny random Hugging Face T5


def test_a_hugging_face_teacher_teaches_the_student_fine_tuned_from_it(hf_t5_dir, tmp_path, shared_data):
    """The student takes the directory's tokenizer, so the teacher's matches; with its weights and no dropout
    the two distributions agree."""
    extra = [f"training.distill.teacher={hf_t5_dir}", "model.dropout=0.0", "training.steps=1"]
    assert hf.finetune(hf_t5_dir, tmp_path / "run", shared_data, *extra) == 0
    assert abs(records(tmp_path / "run")[0]["distill_kl"]) < 1e-6
