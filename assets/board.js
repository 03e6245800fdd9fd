// The board's page behaviours (js_on_load of the cards' gr.HTML: `element` is the component,
// mounted once; each new HTML replaces what is inside it).
// 1. A card has a fixed height and its text scrolls inside: every update shows the live end
//    of each answer, but not the card under the pointer (someone is reading it).
// 2. On a narrow screen the lesson sits below the controls: a preset tap brings its question
//    into view as soon as the question arrives.
// 3. An open lesson's chart leads the charts: #pg-charts' data-lead names it (style.css),
//    changed only when the lesson's chart does, so a frame restyles nothing else.
const toEnd = () => {
  const texts = [...element.querySelectorAll(".pg-text")].filter(
    (text) => !text.closest(".pg-card:hover"));
  const ends = texts.map((text) => text.scrollHeight);  // one layout for all, then the writes
  texts.forEach((text, i) => { text.scrollTop = ends[i]; });
};
new MutationObserver(toEnd).observe(element, { childList: true, subtree: true });
toEnd();
const lead = () => {
  const charts = document.querySelector("#pg-charts");
  const lesson = document.querySelector("#pg-lesson .pg-lesson[data-chart]");
  const chart = lesson ? lesson.dataset.chart : "";
  if (charts && charts.dataset.lead !== chart) charts.dataset.lead = chart;
};
const watchLesson = () => {
  const lesson = document.querySelector("#pg-lesson");
  if (!lesson) return void setTimeout(watchLesson, 250);  // mounted after the board
  new MutationObserver(lead).observe(lesson, { childList: true, subtree: true });
  lead();
};
watchLesson();
let asked = false;
let watching = false;
// Scrolls once the question itself is there: the lesson panel also changes before it arrives
// (the stream rewrites it), and scrolling then would leave the question below the fold.
const showQuestion = () => {
  const lesson = document.querySelector("#pg-lesson");
  if (!asked || !lesson || !lesson.querySelector(".pg-lesson-q")) return;
  asked = false;
  lesson.scrollIntoView({ block: "start", behavior: "instant" });
};
document.addEventListener("click", (event) => {
  if (!event.target.closest(".pg-preset") || window.innerWidth > 760) return;
  asked = true;
  const lesson = document.querySelector("#pg-lesson");
  if (lesson && !watching) {
    watching = true;
    new MutationObserver(showQuestion).observe(lesson, { childList: true, subtree: true,
                                                        characterData: true });
  }
  setTimeout(showQuestion, 1500);  // in case the question came before the observer looked
});
