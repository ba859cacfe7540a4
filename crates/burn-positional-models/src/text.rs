//! Text in and out with Hugging Face's `tokenizers` (the `tokenizers` feature): a checkpoint's
//! `tokenizer.json`, ids checked against it, and text streamed as it is decoded.
//!
//! ```
//! use burn_positional_models::text::Text;
//!
//! let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tokenizer/tokenizer.json");
//! let text = Text::from_file(path).unwrap();
//! let ids = text.encode("The dog bites the man.").unwrap();
//! assert_eq!(text.decode(&ids).unwrap(), "The dog bites the man.");
//! // Streamed: each id gives the text it completes (none while a character is incomplete).
//! let mut stream = text.stream();
//! let mut out = String::new();
//! for &id in &ids {
//!     out.push_str(&stream.step(id).unwrap().unwrap_or_default());
//! }
//! assert_eq!(out, "The dog bites the man.");
//! ```

use std::path::Path;

use tokenizers::PreTokenizerWrapper;
use tokenizers::tokenizer::{DecodeStream, Tokenizer};
use tokenizers::{DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper};

use crate::ModelError;

/// A tokenizer read from a `tokenizer.json`.
pub struct Text {
    tokenizer: Tokenizer,
    path: String,
}

/// Text decoded one id at a time (`tokenizers`' `DecodeStream`): each step gives the text the
/// new id completes, so multi-byte characters and merged spaces come out whole.
pub struct TextStream<'a> {
    inner: DecodeStream<
        'a,
        ModelWrapper,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    >,
    vocab_size: usize,
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Text")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl Text {
    /// Reads `tokenizer.json`.
    ///
    /// # Errors
    ///
    /// [`ModelError::Tokenizer`] naming the file, for a file that is missing or not a
    /// tokenizer.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref().display().to_string();
        let tokenizer = Tokenizer::from_file(&path).map_err(|e| ModelError::Tokenizer {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        Ok(Self { tokenizer, path })
    }

    /// Tokens in the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// The ids of `text` (special tokens added as the tokenizer's post-processor says).
    ///
    /// # Errors
    ///
    /// [`ModelError::Tokenizer`] with the tokenizer's reason.
    pub fn encode(&self, text: &str) -> Result<Vec<i64>, ModelError> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| self.error(e.to_string()))?;
        Ok(encoding.get_ids().iter().map(|&id| id as i64).collect())
    }

    /// The text of `ids`, special tokens skipped.
    ///
    /// # Errors
    ///
    /// [`ModelError::Tokenizer`] for an id outside the tokenizer's vocabulary (naming it).
    pub fn decode(&self, ids: &[i64]) -> Result<String, ModelError> {
        let ids = ids
            .iter()
            .map(|&id| self.id(id))
            .collect::<Result<Vec<u32>, _>>()?;
        self.tokenizer
            .decode(&ids, true)
            .map_err(|e| self.error(e.to_string()))
    }

    /// A stream that decodes one id at a time, special tokens skipped.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            inner: self.tokenizer.decode_stream(true),
            vocab_size: self.vocab_size(),
        }
    }

    fn id(&self, id: i64) -> Result<u32, ModelError> {
        check_id(id, self.vocab_size()).map_err(|detail| self.error(detail))
    }

    fn error(&self, detail: String) -> ModelError {
        ModelError::Tokenizer {
            path: self.path.clone(),
            detail,
        }
    }
}

impl TextStream<'_> {
    /// The text `id` completes: `None` while it only starts a character or a word piece the
    /// next ids finish.
    ///
    /// # Errors
    ///
    /// [`ModelError::Tokenizer`] for an id outside the vocabulary or a decoder failure.
    pub fn step(&mut self, id: i64) -> Result<Option<String>, ModelError> {
        let error = |detail: String| ModelError::Tokenizer {
            path: "tokenizer.json".into(),
            detail,
        };
        let id = check_id(id, self.vocab_size).map_err(error)?;
        self.inner.step(id).map_err(|e| error(e.to_string()))
    }
}

fn check_id(id: i64, vocab_size: usize) -> Result<u32, String> {
    u32::try_from(id)
        .ok()
        .filter(|&id| (id as usize) < vocab_size)
        .ok_or_else(|| {
            format!(
                "id {id} is outside the tokenizer's vocabulary 0..{vocab_size} (the model's \
                 vocabulary may be larger than its tokenizer's: its last rows are padding)"
            )
        })
}
